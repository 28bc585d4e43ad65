//! EIM specs (the host's Extension Interface Model, YAML) for test hosts whose hooks take
//! [`ValueOut`](crate::ValueOut): `value` readable, `out` readable and writable.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The map helpers every test class allows.
pub const MAP_HELPERS: [&str; 3] = ["map_lookup_elem", "map_update_elem", "map_delete_elem"];

/// The helpers of the tests' usual `default` class: the map helpers and `ringbuf_output`.
pub const MAP_AND_RINGBUF_HELPERS: [&str; 4] = [
    "map_lookup_elem",
    "map_update_elem",
    "map_delete_elem",
    "ringbuf_output",
];

#[derive(Clone, Debug)]
struct Class {
    name: String,
    helpers: Vec<String>,
    instructions: u64,
    xstate_bytes: u64,
}

/// Hooks with the `value`/`out` context and the classes bound to each of them.
///
/// ```
/// let spec = rdx_test_support::EimSpec::value_out(&["on_request"])
///     .class("default", &["map_lookup_elem"], 100_000, 1 << 20)
///     .yaml();
/// assert!(spec.contains("helpers: [map_lookup_elem]"));
/// ```
#[derive(Clone, Debug)]
pub struct EimSpec {
    hooks: Vec<String>,
    classes: Vec<Class>,
}

impl EimSpec {
    /// A spec declaring `hooks`, each with the [`ValueOut`](crate::ValueOut) context and
    /// default return 0, and no classes yet.
    pub fn value_out(hooks: &[&str]) -> EimSpec {
        EimSpec {
            hooks: hooks.iter().map(|h| h.to_string()).collect(),
            classes: Vec::new(),
        }
    }

    /// Binds a class to every hook: the helpers it may call, its instruction budget and the
    /// bytes of extension state (maps) it may create.
    pub fn class(
        mut self,
        name: &str,
        helpers: &[&str],
        instructions: u64,
        xstate_bytes: u64,
    ) -> EimSpec {
        self.classes.push(Class {
            name: name.into(),
            helpers: helpers.iter().map(|h| h.to_string()).collect(),
            instructions,
            xstate_bytes,
        });
        self
    }

    /// The spec as the runtime reads it (EIM YAML).
    pub fn yaml(&self) -> String {
        let mut s = String::from("version: 1\nhooks:\n");
        for h in &self.hooks {
            let _ = write!(
                s,
                "  - name: {h}\n    context:\n      size: 16\n      fields:\n        \
                 - {{name: value, offset: 0, size: 8, access: read}}\n        \
                 - {{name: out, offset: 8, size: 8, access: read_write}}\n"
            );
        }
        s += "classes:\n";
        for h in &self.hooks {
            for c in &self.classes {
                let _ = write!(
                    s,
                    "  - name: {}\n    hook: {h}\n    context: {{read: [value, out], write: [out]}}\n    \
                     helpers: [{}]\n    instructions: {}\n    xstate_bytes: {}\n",
                    c.name,
                    c.helpers.join(", "),
                    c.instructions,
                    c.xstate_bytes
                );
            }
        }
        s
    }

    /// Writes the spec to `path` (for commands that take an EIM file) and returns the path.
    pub fn write(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        std::fs::write(path, self.yaml())
            .unwrap_or_else(|e| panic!("writing the EIM spec {}: {e}", path.display()));
        path.to_path_buf()
    }
}

/// The tests' usual host: one hook, `on_request`, and a `default` class allowing `helpers`,
/// 100 000 instructions and 1 MiB of extension state.
pub fn on_request(helpers: &[&str]) -> String {
    EimSpec::value_out(&["on_request"])
        .class("default", helpers, 100_000, 1 << 20)
        .yaml()
}

/// The control-path benchmarks' host (injection, verifier control shapes): `on_request` with a
/// `default` class allowing map lookups and updates, 4 000 000 instructions and 1 MiB of
/// extension state.
pub fn bench_on_request() -> String {
    EimSpec::value_out(&["on_request"])
        .class(
            "default",
            &["map_lookup_elem", "map_update_elem"],
            4_000_000,
            1 << 20,
        )
        .yaml()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_spec_is_what_the_verifier_reads() {
        use rdx_verifier::eim::{AccessSpec, InstructionLimit};
        let spec = rdx_verifier::EimSpec::from_yaml(&on_request(&MAP_AND_RINGBUF_HELPERS))
            .expect("valid YAML");
        spec.validate().expect("a valid spec");
        let [hook] = &spec.hooks[..] else {
            panic!("{:?}", spec.hooks)
        };
        assert_eq!((hook.name.as_str(), hook.context.size), ("on_request", 16));
        let fields: Vec<_> = hook
            .context
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.offset, f.size, f.access))
            .collect();
        assert_eq!(
            fields,
            [
                ("value", 0, 8, AccessSpec::Read),
                ("out", 8, 8, AccessSpec::ReadWrite)
            ]
        );
        let [class] = &spec.classes[..] else {
            panic!("{:?}", spec.classes)
        };
        assert_eq!(
            (class.name.as_str(), class.hook.as_str()),
            ("default", "on_request")
        );
        assert_eq!(class.context.read, ["value", "out"]);
        assert_eq!(class.context.write, ["out"]);
        assert_eq!(class.helpers, MAP_AND_RINGBUF_HELPERS);
        assert_eq!(class.instructions, InstructionLimit::Count(100_000));
        assert_eq!(class.xstate_bytes, 1 << 20);
    }

    #[test]
    fn every_class_is_bound_to_every_hook_and_the_spec_is_written() {
        let spec = EimSpec::value_out(&["a", "b"])
            .class("default", &MAP_HELPERS, 100, 64)
            .class("tight", &[], 10, 0);
        let yaml = spec.yaml();
        assert_eq!(yaml.matches("  - name: default\n").count(), 2);
        assert!(yaml.contains("  - name: tight\n    hook: b\n"), "{yaml}");
        assert!(yaml.contains("helpers: []\n"), "{yaml}");
        let dir = crate::ScratchDir::new("ts-eim");
        let path = spec.write(dir.join("spec.yaml"));
        assert_eq!(std::fs::read_to_string(path).unwrap(), yaml);
    }
}
