"""spark-submit entry point: spark-submit spark/pipelines/click_stats.py --help
(the pipeline itself is ferry.spark.pipelines.click_stats, also runnable with python -m)."""

from ferry.spark.pipelines.click_stats import main

if __name__ == "__main__":
    raise SystemExit(main())
