"""The `ferry` data source: what spark.read/readStream/write/writeStream.format("ferry") get."""

from __future__ import annotations

import uuid

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ferry.spark.options import read_options, write_options
from ferry.spark.reader import (
    ADMISSION_CONTROL,
    FerryBatchReader,
    FerryStreamReader,
    LegacyFerryStreamReader,
)
from ferry.spark.rows import spark_schema
from ferry.spark.writer import FerryBatchWriter, FerryStreamWriter, check_sink_schema


class FerryDataSource(DataSource):
    """Options are parsed here, on the driver, so a bad option fails before any task runs."""

    @classmethod
    def name(cls) -> str:
        return "ferry"

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> FerryBatchReader:
        return FerryBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> FerryStreamReader:
        opts = read_options(self.options, streaming=True)
        return FerryStreamReader(opts) if ADMISSION_CONTROL else LegacyFerryStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> FerryBatchWriter:
        opts = write_options(self.options, uuid.uuid4().hex)
        check_sink_schema(schema, opts)
        return FerryBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> FerryStreamWriter:
        opts = write_options(self.options, uuid.uuid4().hex)
        check_sink_schema(schema, opts)
        return FerryStreamWriter(opts)
