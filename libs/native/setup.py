"""The C extension; everything else is in pyproject.toml.

One module, ferry.native._speedups, compiled from one unit per user (src/ferry/native/
speedups.h lists them). optional: where it cannot be built (no C compiler), the install goes
on without it and ferry.native.ENABLED is False, so the Python code runs.
"""

from setuptools import Extension, setup

SRC = "src/ferry/native/"
UNITS = [
    "_speedups.c",
    "record.c",
    "store.c",
    "index.c",
    "sdk.c",
    "sdk_receive.c",
    "sdk_send.c",
    "door.c",
]

setup(
    ext_modules=[
        Extension(
            "ferry.native._speedups",
            [SRC + unit for unit in UNITS],
            depends=[SRC + "speedups.h", SRC + "record_layout.h"],
            libraries=["z"],  # zlib's crc32, as zlib.crc32 (python3 itself needs libz)
            # hidden: what the units lend each other is reached directly, not through the GOT
            # as an exported symbol would be (PyInit__speedups is exported by PyMODINIT_FUNC)
            extra_compile_args=[
                *("-O2", "-std=c11", "-fvisibility=hidden"),
                *("-Wall", "-Wextra", "-Wno-unused-parameter"),
            ],
            optional=True,
        )
    ]
)
