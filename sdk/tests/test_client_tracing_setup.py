"""Client tracing follows OpenTelemetry's conventions: the global provider, whenever it is set,
and enable_tracing() as the one line that sets one up. Each case runs in a fresh interpreter,
since a process's global provider can be set only once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from ferry.client.tracing_setup import traces_url


def run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**clean, **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_provider_installed_after_a_client_started_is_used() -> None:
    out = run(
        """
        import time
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from ferry.client.instance import ClientInstance

        inst = ClientInstance("127.0.0.1:1", role="producer")
        print("before", inst.tracing.enabled)
        trace.set_tracer_provider(TracerProvider())
        deadline = time.monotonic() + 10
        while not inst.tracing.enabled and time.monotonic() < deadline:
            time.sleep(0.05)  # wait-ok: polling interval of a deadline-bounded wait
        print("after", inst.tracing.enabled)
        inst.close()
        """
    )
    assert out.split() == ["before", "False", "after", "True"]


def test_enable_tracing_installs_one_global_provider_and_keeps_it() -> None:
    out = run(
        """
        from opentelemetry import trace
        import ferry.client

        provider = ferry.client.enable_tracing("127.0.0.1:9", service_name="tour")
        print(trace.get_tracer_provider() is provider)
        print(provider.resource.attributes["service.name"])
        print(ferry.client.enable_tracing() is provider)  # a second call keeps it
        """
    )
    assert out.split() == ["True", "tour", "True"]


def test_enable_tracing_leaves_an_application_provider_in_place() -> None:
    out = run(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        import ferry.client

        mine = TracerProvider()
        trace.set_tracer_provider(mine)
        print(ferry.client.enable_tracing("http://127.0.0.1:9") is mine)
        """
    )
    assert out.split() == ["True"]


FROM_ENV = """
    from opentelemetry import trace
    from ferry.client.tracing import process_tracing

    tracing = process_tracing("ferry-spark-worker")
    provider = trace.get_tracer_provider()
    print(tracing.enabled, getattr(provider, "resource", None) and
          provider.resource.attributes["service.name"])
    """


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({}, "False None"),  # nothing asked: no provider, no span work
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, "True ferry-spark-worker"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "True ferry-spark-worker"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"},
            "False None",
        ),
    ],
)
def test_processes_no_app_sets_up_follow_the_otel_variables(env: dict[str, str], said: str) -> None:
    assert run(FROM_ENV, **env).strip() == said


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("127.0.0.1:8080", "http://127.0.0.1:8080/v1/traces"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1/traces"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/v1/traces"),
        ("https://collector:4318/custom/path", "https://collector:4318/custom/path"),
    ],
)
def test_an_address_becomes_the_otlp_traces_url(given: str, url: str) -> None:
    assert traces_url(given) == url
