"""The proxy's composition root: a grpc.aio server, ferry.client.aio's Producer and the pop
client of the consumers (consuming.Popper) on one asyncio loop, in the main thread.

One loop rather than a gRPC thread pool beside the SDK: every call is a coroutine that awaits
the SDK directly, with no hand-off between threads, and the Producer's automatic batching
joins the sends of concurrent calls into one request per broker. The proxy keeps no state of
its own: routes come from the name servers, messages go to the brokers, and a receipt handle
carries what an ack needs (the consumers' subscriptions, learnt from their Telemetry streams,
are kept only to register them with the brokers while the streams are open).

With the cluster's security keys it is one of the cluster's services: it signs its requests
with the inner credentials and reaches the brokers over CURVE; authenticationEnabled checks
every gRPC call first (ferry.proxy.auth, users from ferry.proxy.users), and tlsEnable serves
the gRPC port over TLS (ferry.proxy.tls).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import grpc

from ferry.client.aio import Producer
from ferry.proxy import observe
from ferry.proxy.consuming import Popper
from ferry.proxy.convert import ServerSettings
from ferry.proxy.interceptor import call_checks
from ferry.proxy.renew import Renewer, RenewPolicy
from ferry.proxy.routes import RouteLookup
from ferry.proxy.service import MessagingService
from ferry.proxy.tls import server_credentials
from ferry.proxy.transactions import HalfProducer, Transactions
from ferry.proxy.users import UserPuller
from ferry.runtime.config import DEFAULT_DELAY_LEVELS, ProxyConfig, parse_delay_levels
from ferry.runtime.endpoints import announce_ready

log = logging.getLogger("ferry.proxy")

SERVICE_NAME = "proxy"
PRODUCER_GROUP = "FERRY_PROXY_PRODUCER"
STOP_GRACE_S = 2.0
PARENT_CHECK_S = 0.5
# a retried delivery waits as RocketMQ's retries do: the delay levels from the third (10 s) on
RETRY_DELAYS_MS = tuple(parse_delay_levels(DEFAULT_DELAY_LEVELS)[2:])


class ListenError(Exception):
    """The gRPC port cannot be bound."""


class ProxyApp:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.settings = ServerSettings(
            max_body_size=config.max_message_size,
            consume_backoff_ms=RETRY_DELAYS_MS,
            consume_attempts=len(RETRY_DELAYS_MS) + 1,
        )

    def run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        config = self.config
        # the cluster's own identity and CURVE key: what the proxy's requests to it carry
        inner = config.inner_credentials() if config.authentication_enabled else None
        key = config.tls_server_key_file if config.tls_enable else None
        producer = Producer(
            PRODUCER_GROUP,
            config.namesrv_addr,
            max_message_size=config.max_message_size,
            credentials=inner,
            tls_server_key=key,
        )
        halves = HalfProducer(
            config.namesrv_addr,
            max_message_size=config.max_message_size,
            credentials=inner,
            tls_server_key=key,
        )
        transactions = Transactions(halves)
        routes = RouteLookup(config.namesrv_addr, inner, key)
        popper = Popper(config.namesrv_addr, credentials=inner, tls_server_key=key)
        users: UserPuller | None = None
        # metrics and spans outermost: refused calls are counted too, by their Status
        interceptors: list[grpc.aio.ServerInterceptor] = list(observe.interceptors(config))
        if inner is not None:  # authenticationEnabled: every call checked (ferry.proxy.auth)
            users = UserPuller(config.namesrv_addr, inner, key)
            checks = call_checks(SERVICE_NAME, inner, config.authorization_enabled, users.mirror)
            interceptors.append(checks)
        server = grpc.aio.server(interceptors=interceptors)
        address = f"{config.listen_host}:{config.proxy_listen_port}"
        try:
            if config.tls_enable:
                tls = server_credentials(config.tls_server_cert_path, config.tls_server_key_path)
                port = server.add_secure_port(address, tls)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as err:  # grpc's "Failed to bind"
            raise ListenError(str(err)) from None
        if port == 0:  # older grpc's way to say the same
            raise ListenError("the port is in use or the host is not this machine's")
        where = (config.advertised_host, port)
        policy = RenewPolicy(
            invisible_ms=config.default_invisible_time_mills,
            ahead_ms=config.renew_ahead_time_millis,
            max_ms=config.renew_max_time_millis,
        )
        renewer = Renewer(popper, policy)
        service = MessagingService(
            producer, popper, routes, self.settings, where, transactions, renewer
        )
        server.add_generic_rpc_handlers((service.handler(),))
        await producer.start()
        await halves.start()
        transactions.start()
        routes.start()
        popper.start()
        renewer.start()
        if users is not None:
            await users.start()  # the first pull: users known at start are known at READY
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        watch = asyncio.create_task(_watch_parent(stop))
        scrape = observe.metrics_endpoint(config)  # PROM: the proxy's own /metrics
        try:
            await server.start()
            fields = {"grpc": f"{where[0]}:{where[1]}"}
            if scrape is not None:
                fields["metrics"] = scrape.addr
            announce_ready(SERVICE_NAME, **fields)
            log.info("proxy serving gRPC on %s:%d", *where)
            await stop.wait()
            log.info("proxy stopping")
        finally:
            watch.cancel()
            if scrape is not None:
                scrape.close()
            await server.stop(STOP_GRACE_S)
            await renewer.close()
            await producer.shutdown()
            await halves.shutdown()
            await routes.close()
            await popper.close()
            if users is not None:
                await users.close()


async def _watch_parent(stop: asyncio.Event) -> None:
    """Stops the proxy when the process that started it (FERRY_PARENT_PID) is gone."""
    parent = os.environ.get("FERRY_PARENT_PID", "")
    if not parent.isdigit():
        return
    while os.getppid() == int(parent):
        await asyncio.sleep(PARENT_CHECK_S)
    log.warning("parent %s is gone, stopping", parent)
    stop.set()
