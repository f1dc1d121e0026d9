//! The command-line parser: a table of flags per subcommand, read the way Go's pflag
//! reads the cloud-controller-manager's command line, so that arguments copied from a
//! CCM manifest mean the same here.
//!
//! pflag's rules, which argh cannot follow (it has no `--flag=value`, no repeated
//! scalar flags, no `-v=2`, and booleans only as `true`/`false`):
//! - `--name=value` and `--name value`; `-x=value`, `-x value` and `-xvalue` for a
//!   flag with a shorthand.
//! - A boolean is `--name` (true) or `--name=VALUE` with VALUE as Go's
//!   `strconv.ParseBool` takes it; it never takes the next argument.
//! - A repeated flag: the last value wins, except lists and maps, which collect every
//!   value (`--controllers=a --controllers=b`, `--feature-gates=A=true --feature-gates=B=false`).
//! - `--` ends the flags; a bare argument is an error (the CCM takes none).
//!
//! Every value is checked against its flag's type while parsing, also for the flags
//! that are accepted only for compatibility, so a typo in an ignored flag still fails
//! as it would in the CCM.

use std::fmt::Write as _;

use super::UsageError;

/// What a flag's value is; decides how it is parsed and whether repeats add up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `--name` or `--name=BOOL`.
    Bool,
    /// Any text; the last one wins.
    String,
    /// A Go duration (`10s`, `1h30m`); the last one wins.
    Duration,
    /// A whole number; the last one wins.
    Int,
    /// A number; the last one wins.
    Float,
    /// Comma-separated values; repeats append.
    List,
    /// Comma-separated `KEY=VALUE` pairs; repeats merge, a later key wins.
    Map,
}

impl Kind {
    /// How help shows the value.
    fn placeholder(self) -> &'static str {
        match self {
            Kind::Bool => "",
            Kind::String => " string",
            Kind::Duration => " duration",
            Kind::Int => " int",
            Kind::Float => " float",
            Kind::List => " strings",
            Kind::Map => " KEY=VALUE,...",
        }
    }
}

/// What route-controller does with a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// The flag has its meaning here.
    Applies,
    /// A cloud-controller-manager flag that has no meaning here: accepted, type
    /// checked, and ignored with one warning line.
    Ignored,
}

/// One flag of a subcommand.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    /// The long name, without dashes.
    pub name: &'static str,
    /// The one-letter name, if any (`-v`, `-h`).
    pub short: Option<char>,
    /// How the value is read and checked.
    pub kind: Kind,
    /// The default as help shows it; "" when there is none.
    pub default: &'static str,
    /// What the flag does. Empty for ignored flags.
    pub help: &'static str,
    /// The command fails without it.
    pub required: bool,
    /// Whether the flag has a meaning here or is only accepted.
    pub role: Use,
}

impl Flag {
    /// A flag that applies, with no default and not required; the other fields are
    /// set with struct update syntax.
    pub const fn new(name: &'static str, kind: Kind, help: &'static str) -> Flag {
        Flag {
            name,
            short: None,
            kind,
            default: "",
            help,
            required: false,
            role: Use::Applies,
        }
    }

    /// A cloud-controller-manager flag that route-controller accepts and ignores.
    pub const fn ignored(name: &'static str, kind: Kind, default: &'static str) -> Flag {
        Flag {
            name,
            short: None,
            kind,
            default,
            help: "",
            required: false,
            role: Use::Ignored,
        }
    }

    /// Gives an accepted flag its meaning: it no longer warns, and help shows it in full.
    pub const fn applies(self, help: &'static str) -> Flag {
        Flag {
            help,
            role: Use::Applies,
            ..self
        }
    }

    pub const fn default(self, default: &'static str) -> Flag {
        Flag { default, ..self }
    }

    pub const fn required(self) -> Flag {
        Flag {
            required: true,
            ..self
        }
    }

    pub const fn short(self, short: char) -> Flag {
        Flag {
            short: Some(short),
            ..self
        }
    }
}

/// `-h, --help`, accepted by every command.
pub const HELP: Flag = Flag::new("help", Kind::Bool, "print this help and exit").short('h');
/// `--version`, accepted by every command.
pub const VERSION: Flag = Flag::new("version", Kind::Bool, "print the version and exit");

/// A subcommand: its name, what it does, and its flags.
pub struct Spec {
    /// The subcommand's name.
    pub name: &'static str,
    /// What it does, for help.
    pub about: &'static str,
    /// Environment variables the command reads, with what they are for.
    pub env: &'static [(&'static str, &'static str)],
    /// Groups of flags, each with a heading.
    pub groups: &'static [(&'static str, &'static [Flag])],
}

impl Spec {
    /// Every flag, `--help` and `--version` included.
    pub fn flags(&self) -> impl Iterator<Item = &'static Flag> + '_ {
        self.groups
            .iter()
            .flat_map(|(_, flags)| flags.iter())
            .chain([&HELP, &VERSION])
    }

    fn find(&self, name: &str) -> Option<&'static Flag> {
        self.flags().find(|f| f.name == name)
    }

    fn find_short(&self, short: char) -> Option<&'static Flag> {
        self.flags().find(|f| f.short == Some(short))
    }

    /// The flag with this long name. Panics if the table lacks it: a programming
    /// error that every test of the command finds.
    fn flag(&self, name: &str) -> &'static Flag {
        self.find(name)
            .unwrap_or_else(|| panic!("{} has no flag --{name}", self.name))
    }
}

/// The flags of one command line, in the order given.
pub struct Parsed {
    spec: &'static Spec,
    values: Vec<(&'static Flag, String)>,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Outcome {
    Parsed(Parsed),
    /// `-h`/`--help`: print this and exit 0.
    Help(String),
    /// `--version`: print this and exit 0.
    Version(String),
}

/// Parses `args` (the arguments after the subcommand's name) against `spec`.
pub fn parse(spec: &'static Spec, args: &[String]) -> Result<Outcome, UsageError> {
    let mut values = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            if let Some(extra) = rest.next() {
                return Err(bare_argument(spec, extra, &values));
            }
            break;
        }
        let (flag, inline) = if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let flag = spec.find(name).ok_or_else(|| unknown_flag(spec, name))?;
            (flag, inline)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = short.chars();
            let letter = chars.next().unwrap_or('-');
            let tail = chars.as_str();
            let flag = spec.find_short(letter).ok_or_else(|| {
                UsageError(format!(
                    "unknown shorthand flag -{letter} in {arg:?} (long flags take two dashes; see route-controller {} --help)",
                    spec.name
                ))
            })?;
            let inline = match tail.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None if tail.is_empty() => None,
                None => Some(tail.to_string()),
            };
            (flag, inline)
        } else {
            return Err(bare_argument(spec, arg, &values));
        };
        let value = match (flag.kind, inline) {
            (_, Some(v)) => v,
            (Kind::Bool, None) => "true".to_string(),
            (_, None) => rest.next().cloned().ok_or_else(|| {
                UsageError(format!(
                    "--{} needs a value (e.g. --{}=VALUE)",
                    flag.name, flag.name
                ))
            })?,
        };
        check_type(flag, &value)?;
        values.push((flag, value));
    }
    let parsed = Parsed { spec, values };
    if parsed.bool("help") {
        return Ok(Outcome::Help(help(spec)));
    }
    if parsed.bool("version") {
        return Ok(Outcome::Version(format!(
            "route-controller {}",
            super::version()
        )));
    }
    if let Some(missing) = spec.flags().find(|f| f.required && !parsed.given(f.name)) {
        return Err(UsageError(format!(
            "--{} is required: {} (see route-controller {} --help)",
            missing.name, missing.help, spec.name
        )));
    }
    Ok(Outcome::Parsed(parsed))
}

/// A bare argument; most often a boolean's value given as the next argument, which
/// pflag (and so the CCM) does not read as the value either.
fn bare_argument(spec: &Spec, arg: &str, values: &[(&'static Flag, String)]) -> UsageError {
    match values.last() {
        Some((flag, _)) if flag.kind == Kind::Bool => UsageError(format!(
            "unexpected argument {arg:?}: a boolean takes its value after '=', as in --{}={arg}",
            flag.name
        )),
        _ => UsageError(format!(
            "unexpected argument {arg:?}: route-controller {} takes only flags (see --help)",
            spec.name
        )),
    }
}

fn unknown_flag(spec: &Spec, name: &str) -> UsageError {
    let closest = closest(name, spec.flags().map(|f| f.name));
    UsageError(format!(
        "unknown flag --{name}{} (see route-controller {} --help)",
        closest
            .map(|c| format!("; did you mean --{c}?"))
            .unwrap_or_default(),
        spec.name
    ))
}

pub use crate::spelling::closest;

/// Go's `strconv.ParseBool`.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn check_type(flag: &Flag, value: &str) -> Result<(), UsageError> {
    let bad = |what: &str| UsageError(format!("--{}: {value:?} is not {what}", flag.name));
    match flag.kind {
        Kind::Bool => parse_bool(value)
            .map(drop)
            .ok_or_else(|| bad("a boolean (true, false, 1, 0, t, f)")),
        Kind::Duration => crate::duration::parse(value.strip_prefix('-').unwrap_or(value))
            .map(drop)
            .map_err(|e| UsageError(format!("--{}: {e}", flag.name))),
        Kind::Int => value
            .parse::<i64>()
            .map(drop)
            .map_err(|_| bad("a whole number")),
        Kind::Float => value.parse::<f64>().map(drop).map_err(|_| bad("a number")),
        Kind::Map => match value
            .split(',')
            .map(str::trim)
            .find(|p| !p.is_empty() && !p.contains('='))
        {
            Some(part) => Err(UsageError(format!(
                "--{}: {part:?} is not KEY=VALUE",
                flag.name
            ))),
            None => Ok(()),
        },
        Kind::String | Kind::List => Ok(()),
    }
}

impl std::fmt::Debug for Parsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parsed")
            .field("command", &self.spec.name)
            .field(
                "values",
                &self
                    .values
                    .iter()
                    .map(|(f, v)| (f.name, v))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Parsed {
    /// Whether the flag was on the command line.
    pub fn given(&self, name: &str) -> bool {
        self.values.iter().any(|(f, _)| f.name == name)
    }

    /// The last value given, if any.
    pub fn last(&self, name: &str) -> Option<&str> {
        self.spec.flag(name);
        self.values
            .iter()
            .rev()
            .find(|(f, _)| f.name == name)
            .map(|(_, v)| v.as_str())
    }

    /// The last value given, or the flag's default.
    pub fn string(&self, name: &str) -> String {
        self.last(name)
            .unwrap_or(self.spec.flag(name).default)
            .to_string()
    }

    /// The last value given, if it is not empty.
    pub fn optional(&self, name: &str) -> Option<String> {
        self.last(name)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    }

    pub fn bool(&self, name: &str) -> bool {
        parse_bool(&self.string(name)).unwrap_or(false)
    }

    /// A number; the type was checked while parsing, the range is the caller's.
    pub fn number<T: std::str::FromStr>(&self, name: &str) -> Result<T, UsageError> {
        let value = self.string(name);
        value.parse().map_err(|_| {
            UsageError(format!(
                "--{name}: {value:?} is out of range (default {})",
                self.spec.flag(name).default
            ))
        })
    }

    /// Every value of a list or map flag, split at commas, in order.
    pub fn items(&self, name: &str) -> Vec<String> {
        self.values
            .iter()
            .filter(|(f, _)| f.name == name)
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// One line per ignored flag on the command line, in the order first given.
    pub fn ignored_warnings(&self) -> Vec<String> {
        let mut seen: Vec<&str> = Vec::new();
        for (flag, _) in &self.values {
            if flag.role == Use::Ignored && !seen.contains(&flag.name) {
                seen.push(flag.name);
            }
        }
        seen.iter()
            .map(|name| {
                format!(
                    "--{name} is a cloud-controller-manager flag that does not apply to route-controller; ignored"
                )
            })
            .collect()
    }
}

/// The command's help: every flag with its default and meaning, required ones
/// marked, the environment variables it reads.
pub fn help(spec: &Spec) -> String {
    let mut out = format!(
        "Usage: route-controller {} [flags]\n\n{}\n",
        spec.name,
        wrap(spec.about, 0)
    );
    for (heading, flags) in spec.groups {
        let _ = writeln!(out, "\n{heading}:");
        for flag in flags.iter().filter(|f| f.role == Use::Applies) {
            flag_help(&mut out, flag);
        }
        let ignored: Vec<&Flag> = flags.iter().filter(|f| f.role == Use::Ignored).collect();
        if !ignored.is_empty() {
            ignored_list(&mut out, &ignored);
        }
    }
    let _ = writeln!(out);
    flag_help(&mut out, &HELP);
    flag_help(&mut out, &VERSION);
    if !spec.env.is_empty() {
        let _ = writeln!(out, "\nEnvironment:");
        for (name, what) in spec.env {
            let _ = writeln!(out, "  {name}\n{}", wrap(what, 6));
        }
    }
    out
}

fn flag_help(out: &mut String, flag: &Flag) {
    let short = flag.short.map(|c| format!("-{c}, ")).unwrap_or_default();
    let _ = writeln!(out, "  {short}--{}{}", flag.name, flag.kind.placeholder());
    let mut text = flag.help.to_string();
    if flag.required {
        text.push_str(" (required)");
    } else if !flag.default.is_empty() {
        let _ = write!(text, " (default: {})", flag.default);
    }
    out.push_str(&wrap(&text, 6));
    out.push('\n');
}

/// The flags of `spec` that apply (not the accepted-and-ignored ones of the CCM), as
/// a Markdown table of flag, default and meaning: the README's table of `run`'s flags
/// is this text, so that it says what `--help` says (a test compares them).
pub fn markdown_table(spec: &Spec) -> String {
    let mut out = String::from("| flag | default | meaning |\n|---|---|---|\n");
    for flag in spec.flags().filter(|f| f.role == Use::Applies) {
        let name = match flag.short {
            Some(short) => format!("`--{}`, `-{short}`", flag.name),
            None => format!("`--{}`", flag.name),
        };
        let default = if flag.required {
            "required".to_string()
        } else if flag.default.is_empty() || flag.default == "[]" {
            "none".to_string()
        } else {
            format!("`{}`", flag.default)
        };
        let _ = writeln!(
            out,
            "| {name} | {default} | {} |",
            flag.help.replace('|', "\\|")
        );
    }
    out
}

/// Ignored flags, several to a line: their meaning is upstream's, and here they have
/// none.
fn ignored_list(out: &mut String, flags: &[&Flag]) {
    let names: Vec<String> = flags
        .iter()
        .map(|f| match f.default {
            "" | "[]" => format!("--{}{}", f.name, f.kind.placeholder().replace(' ', "=")),
            default => format!("--{}={default}", f.name),
        })
        .collect();
    out.push_str(&wrap(&names.join("  "), 2));
    out.push('\n');
}

/// Wraps `text` at 88 columns, indenting every line by `indent` spaces.
fn wrap(text: &str, indent: usize) -> String {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > 88 {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
        .iter()
        .map(|l| format!("{:indent$}{l}", ""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    static FLAGS: &[Flag] = &[
        Flag::new("name", Kind::String, "a name").default("x"),
        Flag::new("on", Kind::Bool, "a switch").default("false"),
        Flag::new("level", Kind::Int, "a level")
            .default("2")
            .short('v'),
        Flag::new("gates", Kind::Map, "gates"),
        Flag::new("period", Kind::Duration, "a period").default("10s"),
        Flag::ignored("old", Kind::Int, "0"),
    ];
    static SPEC: Spec = Spec {
        name: "t",
        about: "a test command",
        env: &[("T_VAR", "what it does")],
        groups: &[("Flags", FLAGS)],
    };

    fn parsed(args: &[&str]) -> Parsed {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse(&SPEC, &args) {
            Ok(Outcome::Parsed(p)) => p,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn error(args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse(&SPEC, &args) {
            Err(e) => e.0,
            Ok(other) => panic!("{args:?} parsed: {other:?}"),
        }
    }

    #[test]
    fn both_spellings_and_the_last_repeat_wins() {
        let p = parsed(&["--name=a", "--name", "b", "--period", "1m"]);
        assert_eq!(p.string("name"), "b");
        assert_eq!(p.string("period"), "1m");
        assert_eq!(parsed(&[]).string("name"), "x", "the default");
        assert_eq!(parsed(&["--name="]).string("name"), "", "an empty value");
        assert_eq!(parsed(&["--name", "-v"]).string("name"), "-v");
    }

    #[test]
    fn booleans_take_every_spelling_of_go_parse_bool_and_never_the_next_argument() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(parsed(&[&format!("--on={t}")]).bool("on"), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert!(!parsed(&["--on", &format!("--on={f}")]).bool("on"), "{f}");
        }
        assert!(parsed(&["--on"]).bool("on"));
        assert!(error(&["--on=yes"]).contains("not a boolean"));
        let err = error(&["--on", "false"]);
        assert!(err.contains("as in --on=false"), "{err}");
    }

    #[test]
    fn a_shorthand_takes_its_value_in_every_form() {
        for args in [&["-v=4"][..], &["-v", "4"], &["-v4"], &["--level=4"]] {
            assert_eq!(parsed(args).string("level"), "4", "{args:?}");
        }
        assert!(error(&["-v=x"]).contains("not a whole number"));
        assert!(error(&["-q"]).contains("unknown shorthand flag -q"));
    }

    #[test]
    fn maps_merge_over_repeats() {
        let p = parsed(&["--gates=A=true,B=false", "--gates", "C=1"]);
        assert_eq!(p.items("gates"), ["A=true", "B=false", "C=1"]);
        assert!(error(&["--gates=A"]).contains("\"A\" is not KEY=VALUE"));
    }

    #[test]
    fn ignored_flags_are_type_checked_and_warned_about_once() {
        let p = parsed(&["--old=1", "--old", "2"]);
        assert_eq!(p.ignored_warnings().len(), 1);
        assert!(p.ignored_warnings()[0].starts_with("--old is a cloud-controller-manager flag"));
        assert!(error(&["--old=x"]).contains("--old"));
    }

    #[test]
    fn unknown_flags_and_bare_arguments_are_errors_that_suggest_the_fix() {
        assert!(error(&["--nmae=a"]).contains("did you mean --name?"));
        assert!(error(&["stray"]).contains("takes only flags"));
        assert!(error(&["--", "x"]).contains("\"x\""));
        assert!(error(&["--name"]).contains("needs a value"));
    }

    #[test]
    fn help_and_version_win_over_everything() {
        let args: Vec<String> = vec!["--name=a".into(), "-h".into()];
        let Ok(Outcome::Help(text)) = parse(&SPEC, &args) else {
            panic!("no help")
        };
        assert!(text.contains("--period duration"), "{text}");
        assert!(text.contains("a period (default: 10s)"), "{text}");
        assert!(text.contains("T_VAR"), "{text}");
        assert!(text.contains("--old=0"), "{text}");
        assert!(!text.contains("{{"), "{text}");
        let args: Vec<String> = vec!["--version".into()];
        assert!(
            matches!(parse(&SPEC, &args), Ok(Outcome::Version(v)) if v.starts_with("route-controller "))
        );
    }
}
