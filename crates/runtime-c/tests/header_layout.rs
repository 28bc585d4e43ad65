//! `include/rdx.h` is written by hand; this test ties each of its structs to its Rust twin.
//! It compiles a C program with the system compiler that prints the size and alignment of
//! every struct of the header and the offset and size of every field, and compares that with
//! the same facts of the `#[repr(C)]` types in this crate, so a field added, removed, reordered
//! or retyped on one side only fails the build's tests.
//!
//! (Generating the header with cbindgen instead would add a code generator to the build and
//! lose the header's hand-written comments, which are the C user's documentation; for two
//! structs and a dozen functions, checking is the cheaper way to keep the two sides equal.)

use rdx_region::abi::HelperFn;
use rdx_runtime_c::{RdxHookStats, RdxOptions};
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::Path;
use std::process::Command;

/// A struct as both sides see it: its C name, size, alignment and fields.
struct Layout {
    c_name: &'static str,
    size: usize,
    align: usize,
    /// Field name, offset and size.
    fields: Vec<(&'static str, usize, usize)>,
}

/// The size of the field that `field` projects.
fn field_size<T, F>(_field: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// The layout of Rust type `$rust` under the C name `$c`, fields named the same on both sides.
macro_rules! layout {
    ($c:ident = $rust:ty { $($field:ident),* $(,)? }) => {
        Layout {
            c_name: stringify!($c),
            size: size_of::<$rust>(),
            align: align_of::<$rust>(),
            fields: vec![$((
                stringify!($field),
                offset_of!($rust, $field),
                field_size(|s: &$rust| &s.$field),
            )),*],
        }
    };
}

fn layouts() -> Vec<Layout> {
    vec![
        layout!(
            rdx_options = RdxOptions {
                path,
                eim,
                eim_len,
                max_hooks,
                thread_slots,
                code_size,
                scratch_size,
                hold_timeout_ns,
            }
        ),
        layout!(
            rdx_hook_stats = RdxHookStats {
                runs,
                failures,
                errors,
                hold_timeouts,
                active,
                deopts,
            }
        ),
    ]
}

/// The facts of `layouts` in the form the C program prints them.
fn rust_facts(layouts: &[Layout]) -> String {
    let mut out = format!("rdx_helper_fn {}\n", size_of::<HelperFn>());
    for l in layouts {
        writeln!(out, "{} {} {}", l.c_name, l.size, l.align).unwrap();
        for (name, offset, size) in &l.fields {
            writeln!(out, "{}.{name} {offset} {size}", l.c_name).unwrap();
        }
    }
    out
}

/// A C program that prints the same facts of the header's definitions.
fn c_program(layouts: &[Layout]) -> String {
    let mut c = String::from(
        "#include <stdalign.h>\n#include <stddef.h>\n#include <stdio.h>\n#include \"rdx.h\"\n\
         int main(void) {\n\tprintf(\"rdx_helper_fn %zu\\n\", sizeof(rdx_helper_fn));\n",
    );
    for l in layouts {
        let t = l.c_name;
        writeln!(
            c,
            "\tprintf(\"{t} %zu %zu\\n\", sizeof({t}), alignof({t}));"
        )
        .unwrap();
        for (name, _, _) in &l.fields {
            writeln!(
                c,
                "\tprintf(\"{t}.{name} %zu %zu\\n\", offsetof({t}, {name}), sizeof((({t} *)0)->{name}));"
            )
            .unwrap();
        }
    }
    c.push_str("\treturn 0;\n}\n");
    c
}

#[test]
fn rdx_h_structs_match_their_rust_twins() {
    let layouts = layouts();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rdx-h-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&source, c_program(&layouts)).unwrap();
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&exe)
        .arg(&source)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "the layout program failed to compile");
    let out = Command::new(&exe).output().expect("run the layout program");
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), rust_facts(&layouts));
}
