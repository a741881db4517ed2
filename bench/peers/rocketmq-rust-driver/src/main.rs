//! Benchmark driver for bench/peers/rocketmq_rust.py: one workload of the `rocketmq-client-rust`
//! client against one RocketMQ name server (RocketMQ in Rust, or Ferry's RocketMQ door), with
//! one JSON line on stdout:
//!
//!     driver --namesrv HOST:PORT --topic T --workload sync|batch|consume --messages N --body 128
//!
//! - sync: N sends one at a time, each timed; p50/p99 are per send.
//! - batch: N messages in batches of `--batch` (32); p50/p99 are per batch send.
//! - consume: a push consumer of a fresh group (CONSUME_FROM_FIRST_OFFSET) reads N messages the
//!   harness loaded beforehand; the rate is counted from the first delivery to the N-th, so the
//!   consumer's start and rebalance are left out. p50/p99 are null.
//!
//! sync and batch send `--warmup` messages first (route lookup, connection), not counted.
//! After `--max-errors` failed sends (batches) the driver gives up: exit 1, no JSON.
//! The client keeps its own defaults (pull batch, consume threads, batch size 1 per listener
//! call). The client's tracing output goes nowhere unless FERRY_DRIVER_LOG holds a filter
//! (`debug`, `rocketmq_client_rust=debug`, ...): then it goes to stderr.

use std::process::ExitCode;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;
use std::time::Instant;

use rocketmq_client_rust::ClientRuntime;
use rocketmq_client_rust::ClientRuntimeConfig;
use rocketmq_client_rust::ConsumeConcurrentlyContext;
use rocketmq_client_rust::ConsumeConcurrentlyStatus;
use rocketmq_client_rust::DefaultMQProducer;
use rocketmq_client_rust::DefaultMQPushConsumer;
use rocketmq_client_rust::MQPushConsumer;
use rocketmq_client_rust::SendStatus;
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_observability::TelemetryHandle;
use rocketmq_runtime::RuntimeConfig;
use rocketmq_runtime::RuntimeOwner;

const USAGE: &str = "usage: driver --namesrv HOST:PORT --topic T --workload sync|batch|consume \
                     --messages N [--body 128] [--batch 32] [--warmup 50] [--group G] \
                     [--timeout-ms 3000] [--consume-timeout-s 120] [--max-errors 10]";

/// Listener calls that may wait for a blocking thread (see main).
const LISTENER_QUEUE_DEPTH: usize = 65_536;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Sync,
    Batch,
    Consume,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Batch => "batch",
            Self::Consume => "consume",
        }
    }
}

#[derive(Debug)]
struct Options {
    namesrv: String,
    topic: String,
    workload: Workload,
    messages: usize,
    body: usize,
    batch: usize,
    warmup: usize,
    group: Option<String>,
    timeout_ms: u64,
    consume_timeout_s: u64,
    max_errors: usize,
}

fn parse_options() -> Result<Options, String> {
    let mut namesrv = None;
    let mut topic = None;
    let mut workload = None;
    let mut messages = None;
    let mut options = Options {
        namesrv: String::new(),
        topic: String::new(),
        workload: Workload::Sync,
        messages: 0,
        body: 128,
        batch: 32,
        warmup: 50,
        group: None,
        timeout_ms: 3000,
        consume_timeout_s: 120,
        max_errors: 10,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|_| format!("{flag}: not a number: {v}"));
        match flag.as_str() {
            "--namesrv" => namesrv = Some(value),
            "--topic" => topic = Some(value),
            "--workload" => {
                workload = Some(match value.as_str() {
                    "sync" => Workload::Sync,
                    "batch" => Workload::Batch,
                    "consume" => Workload::Consume,
                    other => return Err(format!("unknown workload {other}")),
                })
            }
            "--messages" => messages = Some(number(&value)? as usize),
            "--body" => options.body = number(&value)? as usize,
            "--batch" => options.batch = (number(&value)? as usize).max(1),
            "--warmup" => options.warmup = number(&value)? as usize,
            "--group" => options.group = Some(value),
            "--timeout-ms" => options.timeout_ms = number(&value)?,
            "--consume-timeout-s" => options.consume_timeout_s = number(&value)?,
            "--max-errors" => options.max_errors = number(&value)? as usize,
            other => return Err(format!("unknown option {other}")),
        }
    }
    options.namesrv = namesrv.ok_or("--namesrv is required")?;
    options.topic = topic.ok_or("--topic is required")?;
    options.workload = workload.ok_or("--workload is required")?;
    options.messages = messages.ok_or("--messages is required")?;
    if options.messages == 0 {
        return Err("--messages must be positive".into());
    }
    Ok(options)
}

/// What one workload measured; `latencies_us` is empty for consume.
struct Outcome {
    moved: usize,
    seconds: f64,
    msg_per_s: f64,
    latencies_us: Vec<f64>,
    errors: usize,
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let at = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    Some(sorted[at])
}

fn json_number(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.1}"),
        _ => "null".into(),
    }
}

fn message(topic: &str, body: &[u8]) -> Message {
    Message::builder().topic(topic).body_slice(body).build_unchecked()
}

fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

async fn start_producer(runtime: &Arc<ClientRuntime>, options: &Options) -> Result<DefaultMQProducer, String> {
    let mut producer = DefaultMQProducer::builder(Arc::clone(runtime))
        .producer_group(unique_name("ferry-bench-rust-pg"))
        .name_server_addr(options.namesrv.clone())
        .send_msg_timeout(options.timeout_ms as u32)
        .build();
    producer.start().await.map_err(|e| format!("producer start: {e}"))?;
    Ok(producer)
}

async fn send_one(producer: &DefaultMQProducer, options: &Options, body: &[u8]) -> bool {
    match producer.send_with_timeout(message(&options.topic, body), options.timeout_ms).await {
        Ok(Some(result)) => result.send_status == SendStatus::SendOk,
        Ok(None) => false,
        Err(error) => {
            eprintln!("send failed: {error}");
            false
        }
    }
}

async fn send_batch(producer: &DefaultMQProducer, options: &Options, body: &[u8], len: usize) -> bool {
    let batch: Vec<Message> = (0..len).map(|_| message(&options.topic, body)).collect();
    match producer.send_batch_with_timeout(batch, options.timeout_ms).await {
        Ok(result) => result.send_status == SendStatus::SendOk,
        Err(error) => {
            eprintln!("batch send failed: {error}");
            false
        }
    }
}

async fn run_sync(runtime: &Arc<ClientRuntime>, options: &Options) -> Result<Outcome, String> {
    let body = vec![b'x'; options.body];
    let mut producer = start_producer(runtime, options).await?;
    let mut errors = 0;
    for _ in 0..options.warmup {
        if !send_one(&producer, options, &body).await {
            errors += 1;
            if errors >= options.max_errors {
                return Err(format!("{errors} warm-up sends failed"));
            }
        }
    }
    errors = 0;
    let mut latencies_us = Vec::with_capacity(options.messages);
    let began = Instant::now();
    for _ in 0..options.messages {
        let sent = Instant::now();
        if !send_one(&producer, options, &body).await {
            errors += 1;
            if errors >= options.max_errors {
                return Err(format!("{errors} sends failed"));
            }
        }
        latencies_us.push(sent.elapsed().as_secs_f64() * 1e6);
    }
    let seconds = began.elapsed().as_secs_f64();
    producer.shutdown().await;
    Ok(Outcome {
        moved: options.messages,
        seconds,
        msg_per_s: options.messages as f64 / seconds,
        latencies_us,
        errors,
    })
}

async fn run_batch(runtime: &Arc<ClientRuntime>, options: &Options) -> Result<Outcome, String> {
    let body = vec![b'x'; options.body];
    let mut producer = start_producer(runtime, options).await?;
    let mut failed_batches = 0;
    for _ in 0..options.warmup.div_ceil(options.batch) {
        if !send_batch(&producer, options, &body, options.batch).await {
            failed_batches += 1;
            if failed_batches >= options.max_errors {
                return Err(format!("{failed_batches} warm-up batches failed"));
            }
        }
    }
    failed_batches = 0;
    let mut latencies_us = Vec::with_capacity(options.messages / options.batch + 1);
    let mut errors = 0;
    let mut left = options.messages;
    let began = Instant::now();
    while left > 0 {
        let len = left.min(options.batch);
        let sent = Instant::now();
        if !send_batch(&producer, options, &body, len).await {
            errors += len;
            failed_batches += 1;
            if failed_batches >= options.max_errors {
                return Err(format!("{failed_batches} batches failed"));
            }
        }
        latencies_us.push(sent.elapsed().as_secs_f64() * 1e6);
        left -= len;
    }
    let seconds = began.elapsed().as_secs_f64();
    producer.shutdown().await;
    Ok(Outcome {
        moved: options.messages,
        seconds,
        msg_per_s: options.messages as f64 / seconds,
        latencies_us,
        errors,
    })
}

/// Deliveries seen by the listener: the count, and when the first and the N-th arrived.
struct Tally {
    target: usize,
    seen: AtomicUsize,
    first: OnceLock<Instant>,
    last: OnceLock<Instant>,
    done: tokio::sync::Notify,
}

impl Tally {
    fn record(&self, count: usize) {
        let now = Instant::now();
        let before = self.seen.fetch_add(count, Ordering::AcqRel);
        if before == 0 {
            let _ = self.first.set(now);
        }
        if before < self.target && before + count >= self.target {
            let _ = self.last.set(now);
            self.done.notify_one();
        }
    }
}

async fn run_consume(runtime: &Arc<ClientRuntime>, options: &Options) -> Result<Outcome, String> {
    let tally = Arc::new(Tally {
        target: options.messages,
        seen: AtomicUsize::new(0),
        first: OnceLock::new(),
        last: OnceLock::new(),
        done: tokio::sync::Notify::new(),
    });
    let group = options.group.clone().unwrap_or_else(|| unique_name("ferry-bench-rust-cg"));
    let mut consumer = DefaultMQPushConsumer::builder(Arc::clone(runtime))
        .consumer_group(group)
        .name_server_addr(options.namesrv.clone())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .build();
    consumer
        .subscribe(options.topic.as_str(), "*")
        .await
        .map_err(|e| format!("subscribe: {e}"))?;
    let listener_tally = Arc::clone(&tally);
    consumer.register_message_listener_concurrently(
        move |msgs: &[&MessageExt], _: &ConsumeConcurrentlyContext| {
            listener_tally.record(msgs.len());
            Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
        },
    );
    consumer.start().await.map_err(|e| format!("consumer start: {e}"))?;
    let waited = tokio::time::timeout(
        Duration::from_secs(options.consume_timeout_s),
        tally.done.notified(),
    )
    .await;
    consumer.shutdown().await;
    let seen = tally.seen.load(Ordering::Acquire);
    let (Ok(()), Some(first), Some(last)) = (waited, tally.first.get(), tally.last.get()) else {
        return Err(format!(
            "consumed {seen} of {} in {} s",
            options.messages, options.consume_timeout_s
        ));
    };
    let seconds = last.duration_since(*first).as_secs_f64();
    // first to N-th delivery: N - 1 intervals, as the Python consumers in bench/ count it
    let msg_per_s = if options.messages > 1 && seconds > 0.0 {
        (options.messages - 1) as f64 / seconds
    } else {
        f64::NAN
    };
    Ok(Outcome {
        moved: options.messages,
        seconds,
        msg_per_s,
        latencies_us: Vec::new(),
        errors: 0,
    })
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(problem) => {
            eprintln!("{problem}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut runtime_config = RuntimeConfig {
        thread_name: "ferry-bench-driver".into(),
        ..Default::default()
    };
    // The push consumer runs each listener call as a task on the runtime's metadata-io
    // blocking lane, whose default queue on 2 cores is 16 deep (4 running): a pull of 32
    // messages per queue, one message per call, overflows it, and each refused call counts
    // as a failed consume, its message sent back to the broker and redelivered seconds later
    // (runtime.capacity.exhausted, BlockingQueueAdmission). A deep queue admits them all.
    runtime_config.blocking_lane_policies.metadata_io.max_queue_depth = LISTENER_QUEUE_DEPTH;
    let owner = match RuntimeOwner::plan(runtime_config)
    .map_err(|e| format!("{e:?}"))
    .and_then(|plan| plan.build().map_err(|e| e.to_string()))
    {
        Ok(owner) => owner,
        Err(problem) => {
            eprintln!("runtime: {problem}");
            return ExitCode::from(1);
        }
    };
    let _telemetry = match std::env::var("FERRY_DRIVER_LOG") {
        Ok(filter) if !filter.is_empty() => {
            let mut config = rocketmq_observability::TelemetryBootstrapConfig::default();
            config.logging.filter = filter;
            config.logging.file.enabled = false;
            config.logging.console.ansi = false;
            match rocketmq_observability::install_global(&config) {
                Ok(guard) => Some(guard),
                Err(error) => {
                    eprintln!("FERRY_DRIVER_LOG: {error}");
                    None
                }
            }
        }
        _ => None,
    };
    let context = owner.root_context().component("client");
    let result = owner.block_on(async {
        let runtime = ClientRuntime::try_new(context, ClientRuntimeConfig::default(), TelemetryHandle::noop())
            .map_err(|e| format!("client runtime: {e}"))?;
        let outcome = match options.workload {
            Workload::Sync => run_sync(&runtime, &options).await,
            Workload::Batch => run_batch(&runtime, &options).await,
            Workload::Consume => run_consume(&runtime, &options).await,
        };
        let _ = runtime.shutdown().await;
        outcome
    });
    match result {
        Ok(outcome) => {
            let mut sorted = outcome.latencies_us;
            sorted.sort_by(f64::total_cmp);
            println!(
                "{{\"workload\":\"{}\",\"messages\":{},\"seconds\":{:.6},\"msg_per_s\":{},\
                 \"p50_us\":{},\"p99_us\":{},\"errors\":{}}}",
                options.workload.name(),
                outcome.moved,
                outcome.seconds,
                json_number(Some(outcome.msg_per_s)),
                json_number(percentile(&sorted, 0.5)),
                json_number(percentile(&sorted, 0.99)),
                outcome.errors,
            );
            // the client's background tasks are not waited for: the figures are out
            std::process::exit(if outcome.errors == 0 { 0 } else { 1 });
        }
        Err(problem) => {
            eprintln!("{} failed: {problem}", options.workload.name());
            std::process::exit(1);
        }
    }
}
