//! Log output: env_logger honouring `RUST_LOG`, as text for people or as one JSON
//! object per line for log pipelines (`--log-format json`).
//!
//! It must never let a trace record of `ureq`, `ureq_proto` or `rustls` through,
//! whatever `RUST_LOG` says: at trace level ureq-proto writes raw request heads,
//! bearer tokens included. [`Logger`] enforces that cap on every record, so no
//! directive, however specific (`RUST_LOG=ureq_proto::util=trace`), can lift it.

use std::fmt;
use std::str::FromStr;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Targets capped at debug level, with their submodules.
pub const CAPPED_TARGETS: [&str; 3] = ["ureq", "ureq_proto", "rustls"];

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `[2026-11-30T21:00:00.123Z INFO  route_controller::actor] message`
    #[default]
    Text,
    /// `{"ts":"2026-11-30T21:00:00.123Z","level":"info","target":"route_controller::actor","msg":"message"}`
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("{other:?} is not a log format; use text or json")),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// Installs the process logger: `default_level` unless `RUST_LOG` is set (a bare
/// level in `RUST_LOG` replaces it; `RUST_LOG=route_controller=debug` keeps it for
/// the other targets). If a logger is already installed (an embedding program's),
/// that one stays.
pub fn init(format: LogFormat, default_level: LevelFilter) {
    init_verbosity(format, Verbosity::of(default_level));
}

/// klog's `-v`, as levels: 0 to 3 info (2 is the default, as CCM manifests pass it),
/// 4 and 5 this controller's debug records, 6 and 7 its trace records too, and only
/// from 8 the HTTP and TLS libraries' own debug records (their internals: pool,
/// handshake), which an operator rarely wants and which would drown the controller's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verbosity(pub i64);

impl Verbosity {
    /// The verbosity that shows this controller's records at `level`.
    pub fn of(level: LevelFilter) -> Verbosity {
        Verbosity(match level {
            LevelFilter::Off | LevelFilter::Error | LevelFilter::Warn | LevelFilter::Info => 2,
            LevelFilter::Debug => 4,
            LevelFilter::Trace => 6,
        })
    }

    /// The level of this controller's records (and of any other crate's).
    pub fn level(self) -> LevelFilter {
        match self.0 {
            ..=3 => LevelFilter::Info,
            4..=5 => LevelFilter::Debug,
            _ => LevelFilter::Trace,
        }
    }

    /// The level of the HTTP and TLS libraries ([`CAPPED_TARGETS`]).
    pub fn http_level(self) -> LevelFilter {
        match self.0 {
            ..=7 => LevelFilter::Info,
            _ => LevelFilter::Debug,
        }
    }
}

/// Installs the logger with `verbosity`'s levels, `RUST_LOG`'s directives over them.
pub fn init_verbosity(format: LogFormat, verbosity: Verbosity) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let logger = Logger::new(verbosity_builder(format, verbosity, rust_log.as_deref()).build());
    let max = logger.max_level();
    match log::set_logger(Box::leak(Box::new(logger))) {
        Ok(()) => log::set_max_level(max),
        Err(_) => log::debug!("a logger was already installed; keeping it"),
    }
}

/// The env_logger builder for `format`, with `default_level` overridden by the
/// directives of `rust_log` (`RUST_LOG`'s syntax). Wrap what it builds in a
/// [`Logger`], which adds the cap on [`CAPPED_TARGETS`].
pub fn builder(
    format: LogFormat,
    default_level: LevelFilter,
    rust_log: Option<&str>,
) -> env_logger::Builder {
    let mut b = env_logger::Builder::new();
    b.filter_level(default_level);
    if let Some(directives) = rust_log.filter(|s| !s.trim().is_empty()) {
        b.parse_filters(directives);
    }
    match format {
        LogFormat::Text => {
            b.format_timestamp_millis();
        }
        LogFormat::Json => {
            b.format(|buf, record| {
                use std::io::Write as _;
                let ts = buf.timestamp_millis().to_string();
                writeln!(buf, "{}", json_line(&ts, record))
            });
        }
    }
    b
}

/// [`builder`] with `verbosity`'s levels: the HTTP and TLS libraries at theirs, unless
/// `rust_log` gives directives of its own.
pub fn verbosity_builder(
    format: LogFormat,
    verbosity: Verbosity,
    rust_log: Option<&str>,
) -> env_logger::Builder {
    let mut b = builder(format, verbosity.level(), rust_log);
    if rust_log.is_none_or(|r| r.trim().is_empty()) {
        for target in CAPPED_TARGETS {
            b.filter_module(target, verbosity.http_level());
        }
    }
    b
}

/// env_logger's logger with trace records of [`CAPPED_TARGETS`] removed.
#[derive(Debug)]
pub struct Logger {
    inner: env_logger::Logger,
}

impl Logger {
    pub fn new(inner: env_logger::Logger) -> Logger {
        Logger { inner }
    }

    /// The most verbose level any target may log at (for `log::set_max_level`).
    pub fn max_level(&self) -> LevelFilter {
        self.inner.filter()
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        !capped(metadata) && self.inner.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !capped(record.metadata()) {
            self.inner.log(record);
        }
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

/// Whether the record is above debug level from a capped target or its submodules.
fn capped(metadata: &Metadata<'_>) -> bool {
    if metadata.level() <= Level::Debug {
        return false;
    }
    let target = metadata.target();
    CAPPED_TARGETS.iter().any(|t| {
        target
            .strip_prefix(t)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

/// One JSON object: `ts`, `level` (lower case), `target`, `msg`, in that order.
fn json_line(ts: &str, record: &Record<'_>) -> String {
    let s = |v: &str| serde_json::to_string(v).unwrap_or_else(|_| "\"\"".to_string());
    format!(
        "{{\"ts\":{},\"level\":{},\"target\":{},\"msg\":{}}}",
        s(ts),
        s(&record.level().as_str().to_ascii_lowercase()),
        s(record.target()),
        s(&record.args().to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    fn meta(level: Level, target: &str) -> Metadata<'_> {
        Metadata::builder().level(level).target(target).build()
    }

    fn logger(rust_log: Option<&str>) -> Logger {
        Logger::new(builder(LogFormat::Text, LevelFilter::Info, rust_log).build())
    }

    #[test]
    fn log_format_parses_text_and_json_and_names_the_choices_otherwise() {
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        let err = "xml".parse::<LogFormat>().unwrap_err();
        assert_eq!(err, "\"xml\" is not a log format; use text or json");
        assert_eq!(LogFormat::Json.to_string(), "json");
    }

    #[test]
    fn trace_in_rust_log_never_reaches_ureq_ureq_proto_or_rustls() {
        let all = [
            "ureq",
            "ureq::pool",
            "ureq_proto::util",
            "rustls::client::hs",
        ];
        let specific = [
            "ureq::unversioned::transport::tcp",
            "ureq_proto::util",
            "rustls::client::hs",
        ];
        for (rust_log, targets) in [
            ("trace", &all[..]),
            ("ureq=trace,ureq_proto=trace,rustls=trace", &all[..]),
            (
                "ureq_proto::util=trace,ureq::unversioned::transport=trace,rustls::client::hs=trace",
                &specific[..],
            ),
        ] {
            let l = logger(Some(rust_log));
            for target in targets {
                assert!(
                    !l.enabled(&meta(Level::Trace, target)),
                    "RUST_LOG={rust_log}: trace enabled for {target}"
                );
                assert!(
                    l.enabled(&meta(Level::Debug, target)),
                    "RUST_LOG={rust_log}: debug disabled for {target}"
                );
            }
        }
        let l = logger(Some("trace"));
        assert!(l.enabled(&meta(Level::Trace, "route_controller::kube::watch")));
        assert!(
            l.enabled(&meta(Level::Trace, "rustls_pemfile")),
            "only the named crates are capped, not others sharing a prefix"
        );
        assert_eq!(l.max_level(), LevelFilter::Trace);
    }

    /// Guards klog's -v as documented: 2 info, 4 the controller's debug, the HTTP
    /// libraries' debug records (their internals) only from 8.
    #[test]
    fn verbosity_keeps_the_http_libraries_quiet_below_eight() {
        let cases = [
            (0, LevelFilter::Info, LevelFilter::Info),
            (2, LevelFilter::Info, LevelFilter::Info),
            (4, LevelFilter::Debug, LevelFilter::Info),
            (6, LevelFilter::Trace, LevelFilter::Info),
            (7, LevelFilter::Trace, LevelFilter::Info),
            (8, LevelFilter::Trace, LevelFilter::Debug),
            (10, LevelFilter::Trace, LevelFilter::Debug),
        ];
        for (v, ours, http) in cases {
            assert_eq!(Verbosity(v).level(), ours, "-v={v}");
            assert_eq!(Verbosity(v).http_level(), http, "-v={v}");
        }
        assert_eq!(Verbosity::of(LevelFilter::Debug), Verbosity(4));
        let at = |v| Logger::new(verbosity_builder(LogFormat::Text, Verbosity(v), None).build());
        assert!(at(4).enabled(&meta(Level::Debug, "route_controller::controller")));
        assert!(!at(4).enabled(&meta(Level::Debug, "ureq::pool")));
        assert!(!at(6).enabled(&meta(Level::Debug, "rustls::client::hs")));
        assert!(at(8).enabled(&meta(Level::Debug, "ureq_proto::client")));
        assert!(!at(8).enabled(&meta(Level::Trace, "ureq_proto::client")));
    }

    #[test]
    fn rust_log_overrides_the_default_level() {
        let l = logger(None);
        assert!(l.enabled(&meta(Level::Info, "route_controller::actor")));
        assert!(!l.enabled(&meta(Level::Debug, "route_controller::actor")));
        let l = logger(Some(""));
        assert!(!l.enabled(&meta(Level::Debug, "route_controller::actor")));
        let l = logger(Some("warn"));
        assert!(!l.enabled(&meta(Level::Info, "route_controller::actor")));
        // A directive for one crate keeps the default for the others.
        let l = logger(Some("route_controller::actor=debug"));
        assert!(l.enabled(&meta(Level::Debug, "route_controller::actor")));
        assert!(!l.enabled(&meta(Level::Debug, "route_controller::kube")));
        assert!(l.enabled(&meta(Level::Info, "route_controller::kube")));
    }

    /// A pipe target whose output the test reads.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn capturing(format: LogFormat, rust_log: Option<&str>) -> (Logger, Captured) {
        let out = Captured::default();
        let mut b = builder(format, LevelFilter::Info, rust_log);
        b.target(env_logger::Target::Pipe(Box::new(out.clone())));
        (Logger::new(b.build()), out)
    }

    fn emit(logger: &Logger, level: Level, target: &str, msg: fmt::Arguments<'_>) {
        logger.log(
            &Record::builder()
                .level(level)
                .target(target)
                .args(msg)
                .build(),
        );
    }

    #[test]
    fn capped_trace_records_are_not_written_even_when_logged_directly() {
        let (l, out) = capturing(LogFormat::Text, Some("trace"));
        emit(
            &l,
            Level::Trace,
            "ureq_proto::util",
            format_args!("authorization: Bearer s3cr3t"),
        );
        emit(
            &l,
            Level::Debug,
            "ureq::pool",
            format_args!("Return to pool"),
        );
        let text = out.text();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(text.contains("Return to pool"), "{text}");
    }

    #[test]
    fn json_lines_are_one_object_each_with_escaped_fields() {
        let (l, out) = capturing(LogFormat::Json, None);
        emit(
            &l,
            Level::Warn,
            "route_controller::actor",
            format_args!(
                "node \"worker-1\"\nroute 10.244.1.0/24 → failed\t{}",
                '\u{1}'
            ),
        );
        emit(
            &l,
            Level::Info,
            "route_controller::serve",
            format_args!("second"),
        );
        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("{\"ts\":\""), "{}", lines[0]);
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 4, "{v}");
        assert_eq!(v["level"], "warn");
        assert_eq!(v["target"], "route_controller::actor");
        assert_eq!(
            v["msg"],
            "node \"worker-1\"\nroute 10.244.1.0/24 → failed\t\u{1}"
        );
        let ts = v["ts"].as_str().unwrap();
        // 2026-11-30T21:00:00.123Z
        assert_eq!(ts.len(), 24, "{ts}");
        assert_eq!(
            (&ts[4..5], &ts[10..11], &ts[19..20], &ts[23..]),
            ("-", "T", ".", "Z")
        );
        let v: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(v["msg"], "second");
    }

    #[test]
    fn text_lines_carry_a_timestamp_the_level_the_target_and_the_message() {
        let (l, out) = capturing(LogFormat::Text, None);
        emit(
            &l,
            Level::Info,
            "route_controller::actor",
            format_args!("pass 3 done"),
        );
        emit(
            &l,
            Level::Debug,
            "route_controller::actor",
            format_args!("hidden"),
        );
        let text = out.text();
        assert_eq!(text.lines().count(), 1, "{text}");
        let line = text.lines().next().unwrap();
        assert!(line.starts_with('['), "{line}");
        assert!(
            line.contains("Z INFO  route_controller::actor] pass 3 done"),
            "{line}"
        );
    }
}
