"""The `ferry` data source: what spark.read/readStream/write/writeStream.format("ferry") get.

Spark imports this module in every Python process it starts for the source: the driver when
registering, a worker that only asks for the schema, a planning worker, the task workers. The
reader and writer modules (the client, pyarrow) are imported by the methods that need them,
so the first two start faster."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ferry.spark.schema import spark_schema

if TYPE_CHECKING:
    from ferry.spark.reader import FerryBatchReader, FerryStreamReader
    from ferry.spark.writer import FerryBatchWriter, FerryStreamWriter


class FerryDataSource(DataSource):
    """Options are parsed here, on the driver, so a bad option fails before any task runs."""

    @classmethod
    def name(cls) -> str:
        return "ferry"

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> FerryBatchReader:
        from ferry.spark.options import read_options
        from ferry.spark.reader import FerryBatchReader

        return FerryBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> FerryStreamReader:
        from ferry.spark.options import read_options
        from ferry.spark.reader import (
            ADMISSION_CONTROL,
            FerryStreamReader,
            LegacyFerryStreamReader,
        )

        opts = read_options(self.options, streaming=True)
        return FerryStreamReader(opts) if ADMISSION_CONTROL else LegacyFerryStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> FerryBatchWriter:
        from ferry.spark.options import write_options
        from ferry.spark.writer import FerryBatchWriter, check_sink_schema

        opts = write_options(self.options, uuid.uuid4().hex)
        check_sink_schema(schema, opts)
        return FerryBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> FerryStreamWriter:
        from ferry.spark.options import write_options
        from ferry.spark.writer import FerryStreamWriter, check_sink_schema

        opts = write_options(self.options, uuid.uuid4().hex)
        check_sink_schema(schema, opts)
        return FerryStreamWriter(opts)
