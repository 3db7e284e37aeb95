//! An error with its causes, on one line.

use std::error::Error;

/// `err`, then each cause (`source()` walk) that adds something: causes whose
/// text the line already holds (most wrappers quote their source) are left
/// out, the others follow as `; caused by: ...`.
pub(crate) fn error_chain(err: &(dyn Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str("; caused by: ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrap(&'static str, Option<Box<dyn Error + 'static>>);

    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Wrap {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref()
        }
    }

    #[test]
    fn causes_already_quoted_are_left_out() {
        let inner = Wrap("disk full", None);
        let quoted = Wrap("cannot write: disk full", Some(Box::new(inner)));
        assert_eq!(error_chain(&quoted), "cannot write: disk full");
        let inner = Wrap("disk full", None);
        let middle = Wrap("the kernel refused", Some(Box::new(inner)));
        let top = Wrap("setup failed", Some(Box::new(middle)));
        assert_eq!(
            error_chain(&top),
            "setup failed; caused by: the kernel refused; caused by: disk full"
        );
    }
}
