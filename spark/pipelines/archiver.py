"""spark-submit entry point: spark-submit spark/pipelines/archiver.py --help
(the pipeline itself is ferry.spark.pipelines.archiver, also runnable with python -m)."""

from ferry.spark.pipelines.archiver import main

if __name__ == "__main__":
    raise SystemExit(main())
