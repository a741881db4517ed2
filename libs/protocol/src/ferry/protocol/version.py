"""Protocol and record-format versions.

The protocol id travels as its own frame so that a peer speaking another version is told so
(VERSION_NOT_SUPPORTED) before anything is decoded.
"""

PROTOCOL_VERSION = 1
PROTOCOL_ID = b"FERRY/1"
PROTOCOL_PREFIX = b"FERRY/"

# Version of the CommitLog record layout in ferry.protocol.record; pulls return stored records
# as they are, so the layout is part of the protocol.
RECORD_VERSION = 1
