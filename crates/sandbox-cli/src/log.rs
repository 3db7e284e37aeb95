//! Log events from the libraries to stderr: the message, then any fields.
//!
//! `SANDBOX_LOG` sets the most verbose level shown (`error`, `warn`, `info`,
//! `debug` or `trace`; default `warn`). This small subscriber stands in for
//! `tracing-subscriber`, whose registry and directive parser (with its regex
//! engine) more than doubled the code a launch pages in and cost about 60 µs
//! on every `sandbox run`, for output this plain.

use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Installs the subscriber for this process.
pub(crate) fn init() {
    let max = match std::env::var("SANDBOX_LOG").as_deref().map(str::trim) {
        Ok("error") => Level::ERROR,
        Ok("info") => Level::INFO,
        Ok("debug") => Level::DEBUG,
        Ok("trace") => Level::TRACE,
        _ => Level::WARN,
    };
    // Fails only if a subscriber is already set, which then keeps logging.
    let _ = tracing::subscriber::set_global_default(StderrLog { max });
}

struct StderrLog {
    max: Level,
}

impl Subscriber for StderrLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(self.max.into())
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Spans carry nothing this subscriber prints.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = Line::default();
        event.record(&mut line);
        // A value may carry text from the command or the file system.
        crate::show::say(&format!("{}{}", line.message, line.fields));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}
