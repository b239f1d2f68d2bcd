//! A filter's declaration as the dataplane uses it: the declaration itself is data in the
//! catalog (`catalog::FilterSpec`, re-exported here with its types), and this module
//! adds what needs the dataplane's own types: a constructor's type ([`Make`]), the check
//! of a node's arguments against the declaration before the constructor runs ([`check`]),
//! and both in order ([`build`]). `filters` pairs each declaration with its constructor.

pub use catalog::spec::*;

use crate::error::FilterError;
use crate::filter::{Args, Filter};

/// A filter's constructor: its arguments checked ([`check`]) in, the filter out.
pub type Make = fn(&Args) -> Result<Box<dyn Filter>, FilterError>;

/// Checks `args` against `spec`: every key declared (or a control option),
/// no more positional parameters than declared, every value of its parameter's kind.
pub fn check(spec: &FilterSpec, args: &Args) -> Result<(), FilterError> {
    for (key, value) in &args.options {
        match spec.param(key) {
            Some(p) if !p.kind.admits(value) => {
                return Err(FilterError::bad(key, value, &p.kind.expected()))
            }
            Some(_) => {}
            None if lang::CONTROL_OPTIONS.contains(&key.as_str())
                || PLANNER_OPTIONS.contains(&key.as_str()) => {}
            None => {
                return Err(FilterError::Undeclared {
                    key: key.clone(),
                    accepted: spec.params.iter().map(|p| p.name).collect(),
                });
            }
        }
    }
    if let Some(most) = spec.max_positional() {
        if args.positional.len() > most {
            return Err(FilterError::Positional {
                given: args.positional.len(),
                most,
                accepted: (0..most)
                    .filter_map(|i| spec.positional(i))
                    .map(|p| p.name)
                    .collect(),
            });
        }
    }
    for (i, value) in args.positional.iter().enumerate() {
        if let Some(p) = spec.positional(i) {
            // A key given as an option wins over its position (`Args::get`).
            if !args.options.contains_key(p.name) && !p.kind.admits(value) {
                return Err(FilterError::bad(p.name, value, &p.kind.expected()));
            }
        }
    }
    Ok(())
}

/// [`check`], then the filter's constructor.
pub fn build(spec: &FilterSpec, make: Make, args: &Args) -> Result<Box<dyn Filter>, FilterError> {
    check(spec, args)?;
    make(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{Batch, Ctx};
    use proptest::prelude::*;

    struct Pass;
    impl Filter for Pass {
        fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
    }
    fn make(_: &Args) -> Result<Box<dyn Filter>, FilterError> {
        Ok(Box::new(Pass))
    }

    static TOY: FilterSpec = FilterSpec::new("toy", Access::Classification).params(&[
        Param::new("count", "how many")
            .at(0)
            .kind(Kind::Count)
            .default("1"),
        Param::new("mode", "how")
            .at(1)
            .kind(Kind::Choice(&["fast", "slow"])),
        Param::new("icase", "ignore case").kind(Kind::Flag),
    ]);
    static MANY: FilterSpec = FilterSpec::new("many", Access::Inspection)
        .params(&[Param::new("pattern", "patterns").from(0)]);

    fn args(pos: &[&str], opts: &[(&str, &str)]) -> Args {
        Args::new(
            "toy",
            pos.iter().map(|s| s.to_string()).collect(),
            opts.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn declared_arguments_pass() {
        check(&TOY, &args(&["3", "fast"], &[("icase", "yes")])).unwrap();
        check(
            &TOY,
            &args(
                &[],
                &[
                    ("count", "3"),
                    ("name", "x"),
                    ("space", "1"),
                    ("sel", "0.5"),
                ],
            ),
        )
        .unwrap();
        check(&MANY, &args(&["a", "b", "c", "d"], &[])).unwrap();
        assert!(build(&TOY, make, &args(&["3"], &[])).is_ok());
    }

    #[test]
    fn an_undeclared_key_is_named_with_the_keys_accepted() {
        let e = check(&TOY, &args(&[], &[("cuont", "3")])).unwrap_err();
        assert!(
            matches!(&e, FilterError::Undeclared { key, accepted } if key == "cuont" && accepted == &["count", "mode", "icase"]),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "unknown parameter 'cuont': it takes count, mode, icase"
        );
        let none = FilterSpec::new("bare", Access::Classification);
        assert_eq!(
            check(&none, &args(&[], &[("x", "1")]))
                .unwrap_err()
                .to_string(),
            "unknown parameter 'x': it takes no parameters of its own"
        );
        // build checks before make runs.
        assert!(matches!(
            build(&TOY, make, &args(&[], &[("cuont", "3")])),
            Err(FilterError::Undeclared { .. })
        ));
    }

    #[test]
    fn too_many_positionals_say_how_many_it_takes() {
        let e = check(&TOY, &args(&["1", "fast", "extra"], &[])).unwrap_err();
        assert!(
            matches!(
                &e,
                FilterError::Positional {
                    given: 3,
                    most: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "3 positional parameters given, it takes at most 2 (count, mode)"
        );
        let none = FilterSpec::new("bare", Access::Classification);
        assert_eq!(
            check(&none, &args(&["x"], &[])).unwrap_err().to_string(),
            "1 positional parameter given, it takes none"
        );
    }

    #[test]
    fn a_bad_value_names_key_value_and_what_was_expected() {
        let e = check(&TOY, &args(&[], &[("count", "lots")])).unwrap_err();
        assert!(
            matches!(&e, FilterError::BadValue { key, value, expected } if key == "count" && value == "lots" && expected == "a non-negative whole number"),
            "{e:?}"
        );
        // A positional value is checked as the parameter it is.
        assert_eq!(
            check(&TOY, &args(&["2", "medium"], &[]))
                .unwrap_err()
                .to_string(),
            "parameter mode=medium: expected fast or slow"
        );
        assert_eq!(
            check(&TOY, &args(&[], &[("icase", "maybe")]))
                .unwrap_err()
                .to_string(),
            "parameter icase=maybe: expected yes or no"
        );
        // The key wins over the position (as Args::get reads it), so only the key's value counts.
        check(&TOY, &args(&["lots"], &[("count", "2")])).unwrap();
    }

    proptest! {
        /// Hostile arguments get an answer, never a panic, and an error always names
        /// something the arguments hold.
        #[test]
        fn check_never_panics(pos in proptest::collection::vec(".{0,8}", 0..4), opts in proptest::collection::vec(("[a-z]{1,6}", ".{0,8}"), 0..4)) {
            let a = Args::new("toy", pos.clone(), opts.clone());
            if let Err(e) = check(&TOY, &a) {
                let named = match &e {
                    FilterError::BadValue { value, .. } => pos.contains(value) || opts.iter().any(|(_, v)| v == value),
                    FilterError::Undeclared { key, .. } => opts.iter().any(|(k, _)| k == key),
                    FilterError::Positional { given, .. } => *given == pos.len(),
                    _ => false,
                };
                prop_assert!(named, "{e:?}");
            }
        }
    }
}
