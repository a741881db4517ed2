"""Pipelines on the `ferry` source and sink, each runnable as `python -m
ferry.spark.pipelines.<name>` or through `spark-submit spark/pipelines/<name>.py`."""
