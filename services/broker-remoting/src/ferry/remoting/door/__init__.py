"""The broker's RocketMQ door: RocketMQ's remoting protocol (4.x clients and tools) in front of
the same processors as Ferry's own wire (processors.py). Each module gives the routes of its
request codes (ferry.runtime.remoting_door.Route: the command to a Ferry request, the Ferry
reply to a response); server.py puts them together and serves them on rocketmqListenPort.

- produce.py: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320),
  END_TRANSACTION (37); send_records.py builds the records a send stores;
- consume.py: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, CONSUMER_SEND_MSG_BACK,
  LOCK_BATCH_MQ / UNLOCK_BATCH_MQ, and the clients of a connection that closes;
  pull_route.py: PULL_MESSAGE; offset_routes.py: the offset codes;
- admin.py, admin_queries.py, admin_json.py: the codes mqadmin and the dashboard use, and
  the JSON bodies RocketMQ's tools read; asks.py runs the several requests one of them needs;
  reset_offset.py: INVOKE_BROKER_TO_RESET_OFFSET;
- notices.py: what the broker sends a client unasked (NOTIFY_CONSUMER_IDS_CHANGED,
  CHECK_TRANSACTION_STATE, RESET_CONSUMER_CLIENT_OFFSET);
- client_calls.py: what the tools ask a client through the broker (GET_CONSUMER_RUNNING_INFO,
  CONSUME_MESSAGE_DIRECTLY), asked on the client's connection and the answer relayed.
"""
