"""The broker's RocketMQ door: RocketMQ's remoting protocol (4.x clients and tools) in front of
the same processors as Ferry's own wire (processors.py). Each module gives the routes of its
request codes (ferry.runtime.remoting_door.Route: the command to a Ferry request, the Ferry
reply to a response); server.py puts them together and serves them on rocketmqListenPort.

- produce.py: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320),
  END_TRANSACTION (37);
- consume.py: HEART_BEAT, UNREGISTER_CLIENT, PULL_MESSAGE, offsets, GET_CONSUMER_LIST_BY_GROUP,
  CONSUMER_SEND_MSG_BACK, LOCK_BATCH_MQ / UNLOCK_BATCH_MQ;
- admin.py: the codes mqadmin and the dashboard use;
- notices.py: what the broker sends a client unasked (NOTIFY_CONSUMER_IDS_CHANGED,
  CHECK_TRANSACTION_STATE).
"""
