"""The programs the real `rocketmq` 0.4.4 client runs in the tests of the RocketMQ doors, as
source text: each is written to a file and run with the client's venv's python
(rocketmq_client_support starts them)."""

# The consumer program: argv[1:6] namesrv, group, topic, expression, fail keys (comma
# separated: a message with such keys fails its first delivery; the wrapper reports an
# exception in the listener as RECONSUME_LATER); argv[6], optional, JSON options:
# orderly (the orderly listener), broadcasting, fail_always (keys that fail every delivery),
# sleep_ms (per message), explicit_status (a failure returns RECONSUME_LATER from a callback
# of the program's own instead of raising through the wrapper's). One JSON line per message,
# "started" once start() returned; it shuts down when its stdin closes, then prints "stopped".
CONSUMER = r"""
import json, sys, threading, time
from rocketmq.client import PushConsumer
from rocketmq.ffi import MessageModel

namesrv, group, topic, expression, fail_keys = sys.argv[1:6]
options = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
fail = set(filter(None, fail_keys.split(",")))
fail_always = set(options.get("fail_always", []))
sleep_s = options.get("sleep_ms", 0) / 1000.0
failed = set()
lock = threading.Lock()


def out(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def on_message(msg):
    rec = {
        "id": text(msg.id),
        "topic": text(msg.topic),
        "tags": text(msg.tags),
        "keys": text(msg.keys),
        "body": text(msg.body),
        "user": text(msg.get_property("user")),
        "reconsume_times": msg.reconsume_times,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "born_timestamp": msg.born_timestamp,
        "thread": threading.get_ident(),
    }
    with lock:
        first = rec["keys"] in fail and rec["keys"] not in failed
        failed.add(rec["keys"])
    rec["failed"] = first or rec["keys"] in fail_always
    out(rec)
    if sleep_s:
        time.sleep(sleep_s)  # wait-ok: the listener's work, as options ask
    if rec["failed"]:
        raise RuntimeError("the listener fails this message")


model = MessageModel.BROADCASTING if options.get("broadcasting") else MessageModel.CLUSTERING
consumer = PushConsumer(group, orderly=bool(options.get("orderly")), message_model=model)
consumer.set_namesrv_addr(namesrv)
if options.get("explicit_status"):
    # the wrapper's own callback re-raises the listener's exception, so ctypes hands the
    # client an undefined status; this one returns RECONSUME_LATER (1) itself
    from rocketmq.client import RecvMessage, ffi_check
    from rocketmq.ffi import dll

    def on_raw(_consumer, raw):
        try:
            on_message(RecvMessage(raw))
        except RuntimeError:
            return 1
        return 0

    ffi_check(dll.Subscribe(consumer._handle, topic.encode(), expression.encode()))
    consumer._register_callback(on_raw)
else:
    consumer.subscribe(topic, on_message, expression)
consumer.start()
out({"started": True})
sys.stdin.read()
consumer.shutdown()
out({"stopped": True})
"""

# The producer program: argv[1] a JSON spec {"namesrv", "group", "topic", "credentials":
# [access_key, secret_key] or null, "timeout_ms", "messages": [{"mark", "body", "tags",
# "keys", "props", "orderly_arg"}]}. One JSON line per message: {"mark", "status", "msg_id",
# "offset"} or {"mark", "error"}.
PRODUCER = r"""
import json, sys
from rocketmq.client import Message, Producer

spec = json.loads(sys.argv[1])


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


producer = Producer(spec.get("group", "PG_RMQ_MORE"))
producer.set_namesrv_addr(spec["namesrv"])
if spec.get("credentials"):
    producer.set_session_credentials(spec["credentials"][0], spec["credentials"][1], "")
if spec.get("timeout_ms"):
    producer.set_timeout(spec["timeout_ms"])
producer.start()
try:
    for m in spec["messages"]:
        msg = Message(spec["topic"])
        msg.set_body(m["body"])
        if m.get("tags"):
            msg.set_tags(m["tags"])
        if m.get("keys"):
            msg.set_keys(m["keys"])
        for key, value in m.get("props", {}).items():
            msg.set_property(key, value)
        try:
            if m.get("orderly_arg") is not None:
                result = producer.send_orderly(msg, m["orderly_arg"])
            else:
                result = producer.send_sync(msg)
        except Exception as exc:
            out({"mark": m["mark"], "error": "%s: %s" % (type(exc).__name__, exc)})
            continue
        out({"mark": m["mark"], "status": int(result.status), "msg_id": result.msg_id,
             "offset": result.offset})
finally:
    producer.shutdown()
"""


# The pull program: argv[1:4] namesrv, group, topic. Three rounds of PullConsumer.pull(),
# each after a line on stdin: all queues from the offsets it keeps; the second after more
# were sent; before the third, queue 1's offset goes back to 1. One JSON line per round.
PULLER = r"""
import json, sys
from rocketmq.client import PullConsumer

namesrv, group, topic = sys.argv[1:4]
consumer = PullConsumer(group)
consumer.set_namesrv_addr(namesrv)
consumer.start()


def offsets():
    # keys are "<topic>@<queueId>"
    return {k.rsplit("@", 1)[1]: v for k, v in consumer.offset_table.items()}


for round in range(3):
    if not sys.stdin.readline():
        break
    if round == 2:
        for key in list(consumer.offset_table):
            if key.endswith("@1"):
                consumer.offset_table[key] = 1
    got = [
        {"body": m.body.decode(), "queue_id": m.queue_id, "queue_offset": m.queue_offset,
         "tags": m.tags.decode(), "id": m.id}
        for m in consumer.pull(topic)
    ]
    sys.stdout.write(json.dumps({"messages": got, "offsets": offsets()}) + "\n")
    sys.stdout.flush()
consumer.shutdown()
"""
