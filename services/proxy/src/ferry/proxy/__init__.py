"""Ferry's proxy: RocketMQ 5's gRPC protocol (apache.rocketmq.v2.MessagingService), so that
RocketMQ 5's clients (rocketmq-clients: Java, Go, Python, ...) work against Ferry unchanged.

Stateless: it finds the brokers through the name servers and sends with Ferry's own SDK
(ferry.client.aio). This slice serves QueryRoute, Heartbeat, Telemetry (Settings),
SendMessage of NORMAL messages and NotifyClientTermination; every other call is answered
with a NOT_IMPLEMENTED Status.
"""
