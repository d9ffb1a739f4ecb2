//! Program specs: the text form of a program choice, as written in annotations and on the
//! command line — `sleep`, `exit(0, 2s)`, `crash(1s, code=3)`, `oom(5s)`, `pull-error`,
//! `stuck`, `sleep(term=ignore)`.
//!
//! Grammar: `name` or `name(arg, ...)`, where an argument is a positional value or
//! `key=value`. Which arguments a name takes is up to its factory (see
//! [`Programs::register`](super::Programs::register)); the built-ins are parsed here.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::builtin::{NeverStarts, OnTerm, Scripted};
use super::{ContainerProgram, Exit};
use crate::annotations::parse_duration;

/// A parsed program spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramSpec {
    /// The program's name, e.g. `exit`.
    pub name: String,
    /// Positional arguments, in order.
    pub args: Vec<String>,
    /// `key=value` options.
    pub options: BTreeMap<String, String>,
}

/// A spec that cannot be parsed or built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The text does not follow the grammar.
    #[error("invalid program spec {text:?}: {problem}")]
    Syntax {
        /// The spec text.
        text: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// No program of that name is registered.
    #[error("unknown program {0:?} (built-ins: sleep, exit, crash, oom, pull-error, stuck)")]
    Unknown(String),
    /// The program rejected its arguments.
    #[error("invalid arguments for program {program:?}: {message}")]
    Arguments {
        /// The program's name.
        program: String,
        /// What is wrong.
        message: String,
    },
}

impl ProgramSpec {
    /// The error for a bad argument of this spec.
    pub fn invalid(&self, message: impl Into<String>) -> SpecError {
        SpecError::Arguments {
            program: self.name.clone(),
            message: message.into(),
        }
    }

    /// Positional argument `index` parsed as a duration, or `default` when absent.
    pub fn duration_arg(&self, index: usize, default: Duration) -> Result<Duration, SpecError> {
        match self.args.get(index) {
            Some(text) => parse_duration(text).map_err(|e| self.invalid(e.to_string())),
            None => Ok(default),
        }
    }

    /// Option `key` parsed as a duration, or `default` when absent.
    pub fn duration_option(&self, key: &str, default: Duration) -> Result<Duration, SpecError> {
        match self.options.get(key) {
            Some(text) => parse_duration(text).map_err(|e| self.invalid(format!("{key}: {e}"))),
            None => Ok(default),
        }
    }

    /// Option `key` parsed as an exit code, or `default` when absent.
    pub fn code_option(&self, key: &str, default: i32) -> Result<i32, SpecError> {
        match self.options.get(key) {
            Some(text) => parse_code(text).ok_or_else(|| self.invalid(format!("{key}: {text:?}"))),
            None => Ok(default),
        }
    }

    /// Fails if the spec has positional arguments beyond `max` or options outside `known`.
    pub fn expect(&self, max: usize, known: &[&str]) -> Result<(), SpecError> {
        if self.args.len() > max {
            return Err(self.invalid(format!("takes at most {max} positional arguments")));
        }
        match self.options.keys().find(|k| !known.contains(&k.as_str())) {
            Some(key) => Err(self.invalid(format!("unknown option {key:?}"))),
            None => Ok(()),
        }
    }
}

fn parse_code(text: &str) -> Option<i32> {
    text.trim().parse().ok().filter(|c| (0..=255).contains(c))
}

impl FromStr for ProgramSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = |problem| SpecError::Syntax {
            text: text.to_owned(),
            problem,
        };
        let t = text.trim();
        let (name, inner) = match t.split_once('(') {
            None => (t, None),
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix(')')
                    .ok_or_else(|| syntax("missing ')'"))?;
                (name.trim(), Some(inner))
            }
        };
        let name_ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if name.is_empty() || !name.chars().all(name_ok) {
            return Err(syntax("a name of letters, digits, '-' or '_' comes first"));
        }
        let mut spec = ProgramSpec {
            name: name.to_owned(),
            ..ProgramSpec::default()
        };
        for arg in inner.into_iter().flat_map(|i| i.split(',')).map(str::trim) {
            if arg.is_empty() {
                if inner.is_some_and(|i| !i.trim().is_empty()) {
                    return Err(syntax("empty argument"));
                }
                continue;
            }
            if arg.contains(['(', ')']) {
                return Err(syntax("arguments cannot contain parentheses"));
            }
            match arg.split_once('=') {
                Some((key, value)) => {
                    spec.options
                        .insert(key.trim().to_owned(), value.trim().to_owned());
                }
                None if spec.options.is_empty() => spec.args.push(arg.to_owned()),
                None => return Err(syntax("positional arguments come before options")),
            }
        }
        Ok(spec)
    }
}

impl fmt::Display for ProgramSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if self.args.is_empty() && self.options.is_empty() {
            return Ok(());
        }
        let args = self.args.iter().cloned();
        let options = self.options.iter().map(|(k, v)| format!("{k}={v}"));
        let all: Vec<String> = args.chain(options).collect();
        write!(f, "({})", all.join(", "))
    }
}

/// Names of the built-in programs.
pub(crate) const BUILTINS: &[&str] = &["sleep", "exit", "crash", "oom", "pull-error", "stuck"];

/// Builds a built-in program; `None` if `spec` names none.
pub(crate) fn build_builtin(
    spec: &ProgramSpec,
) -> Option<Result<Arc<dyn ContainerProgram>, SpecError>> {
    let scripted = |max_args, extra: &[&str], base: Scripted| {
        let mut known = vec!["term", "term-delay", "term-code", "ready-after"];
        known.extend_from_slice(extra);
        spec.expect(max_args, &known)?;
        let on_term = match spec.options.get("term").map(String::as_str) {
            None | Some("exit") => OnTerm::Exit {
                after: spec.duration_option("term-delay", Duration::ZERO)?,
                exit: Exit::code(spec.code_option("term-code", 0)?),
            },
            Some("ignore") => OnTerm::Ignore,
            Some(other) => return Err(spec.invalid(format!("term: {other:?} (exit or ignore)"))),
        };
        let program = base
            .with_on_term(on_term)
            .with_ready_after(spec.duration_option("ready-after", Duration::ZERO)?);
        Ok(Arc::new(program) as Arc<dyn ContainerProgram>)
    };
    let built = match spec.name.as_str() {
        "sleep" => scripted(0, &[], Scripted::sleep()),
        "exit" => (|| {
            let text = spec
                .args
                .first()
                .ok_or_else(|| spec.invalid("needs an exit code: exit(CODE[, AFTER])"))?;
            let code = parse_code(text).ok_or_else(|| spec.invalid(format!("code {text:?}")))?;
            let after = spec.duration_arg(1, Duration::ZERO)?;
            scripted(2, &[], Scripted::exit_after(code, after))
        })(),
        "crash" => (|| {
            let after = spec.duration_arg(0, Duration::ZERO)?;
            let code = spec.code_option("code", 1)?;
            let exit = Exit::code(code).with_message("nodesim: simulated crash");
            scripted(1, &["code"], Scripted::ending(after, exit))
        })(),
        "oom" => (|| {
            let after = spec.duration_arg(0, Duration::ZERO)?;
            scripted(1, &[], Scripted::oom_after(after))
        })(),
        "pull-error" => spec
            .expect(0, &[])
            .map(|()| Arc::new(NeverStarts::image_pull_error()) as Arc<dyn ContainerProgram>),
        "stuck" => spec
            .expect(0, &[])
            .map(|()| Arc::new(NeverStarts::stuck_creating()) as Arc<dyn ContainerProgram>),
        _ => return None,
    };
    Some(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> ProgramSpec {
        text.parse().unwrap()
    }

    #[test]
    fn specs_parse_names_positional_arguments_and_options() {
        assert_eq!(
            spec("sleep"),
            ProgramSpec {
                name: "sleep".to_owned(),
                ..ProgramSpec::default()
            }
        );
        let s = spec(" exit( 3 , 2s, term=ignore ) ");
        assert_eq!(s.name, "exit");
        assert_eq!(s.args, ["3", "2s"]);
        assert_eq!(s.options["term"], "ignore");
        assert_eq!(spec("stuck()").args, Vec::<String>::new());
    }

    #[test]
    fn malformed_specs_are_rejected() {
        for text in [
            "",
            "exit(0",
            "ex it",
            "exit(0,,1s)",
            "exit(term=ignore, 0)",
            "a(b(c))",
        ] {
            assert!(text.parse::<ProgramSpec>().is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn specs_display_in_their_parsed_form() {
        for text in [
            "sleep",
            "exit(0, 2s)",
            "crash(1s, code=3)",
            "sleep(term=ignore)",
        ] {
            assert_eq!(spec(text).to_string(), text);
        }
    }

    #[test]
    fn builtins_build_the_scripted_behaviour() {
        let debug = |text: &str| format!("{:?}", build_builtin(&spec(text)).unwrap().unwrap());
        assert_eq!(debug("sleep"), format!("{:?}", Scripted::sleep()));
        assert_eq!(
            debug("exit(3, 2s)"),
            format!("{:?}", Scripted::exit_after(3, Duration::from_secs(2)))
        );
        assert_eq!(
            debug("oom(1500ms)"),
            format!("{:?}", Scripted::oom_after(Duration::from_millis(1500)))
        );
        assert_eq!(
            debug("sleep(term=ignore)"),
            format!("{:?}", Scripted::sleep().with_on_term(OnTerm::Ignore))
        );
        assert_eq!(
            debug("sleep(term-delay=3s, term-code=143)"),
            format!(
                "{:?}",
                Scripted::sleep().with_on_term(OnTerm::Exit {
                    after: Duration::from_secs(3),
                    exit: Exit::code(143)
                })
            )
        );
        assert_eq!(
            debug("pull-error"),
            format!("{:?}", NeverStarts::image_pull_error())
        );
    }

    #[test]
    fn builtins_reject_bad_arguments() {
        for text in [
            "exit",
            "exit(256)",
            "exit(x)",
            "exit(0, soon)",
            "sleep(1s)",
            "sleep(term=maybe)",
            "oom(1s, 2s)",
            "crash(code=-1)",
            "stuck(1s)",
            "sleep(colour=red)",
        ] {
            assert!(
                matches!(build_builtin(&spec(text)), Some(Err(_))),
                "{text:?} built"
            );
        }
        assert!(build_builtin(&spec("runner")).is_none());
    }
}
