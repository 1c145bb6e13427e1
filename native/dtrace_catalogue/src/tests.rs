use super::*;

fn probes_d() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../dtrace_nif/probes.d")).unwrap()
}

#[test]
fn dof_stack_args_copy_what_dtrace_reads_from_the_stack() {
    assert_eq!(Arch::X86_64.dof_stack_args(6), None);
    assert_eq!(Arch::Aarch64.dof_stack_args(8), None);
    let (spill, free) = Arch::X86_64.dof_stack_args(9).unwrap();
    assert_eq!(
        spill,
        "lea rsp, [rsp - 32]\nmov qword ptr [rsp + 0], r10\nmov qword ptr [rsp + 8], r11\n\
         mov qword ptr [rsp + 16], r12"
    );
    assert_eq!(free, "lea rsp, [rsp + 32]");
    let (spill, free) = Arch::Aarch64.dof_stack_args(10).unwrap();
    assert_eq!(spill, "sub sp, sp, #16\nstr x8, [sp, #0]\nstr x9, [sp, #8]");
    assert_eq!(free, "add sp, sp, #16");
    assert_eq!(dtrace_name("user_trace__i4s4"), "user_trace-i4s4");
    assert_eq!(dtrace_name("message__send"), "message-send");
}

#[test]
fn the_site_is_nop_then_nop10_on_x86_64_and_nop_on_aarch64() {
    assert_eq!(Arch::X86_64.site(), [0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]);
    assert_eq!(Arch::X86_64.site_asm(), ".byte 0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00");
    assert_eq!(Arch::Aarch64.site(), 0xd503201fu32.to_le_bytes());
    assert_eq!(Arch::Aarch64.site_asm(), "nop");
}

#[test]
fn the_library_catalogue_has_otps_user_and_file_probes() {
    let p = parse(&probes_d()).unwrap().provider;
    assert_eq!(p.name, "erlang");
    assert_eq!(p.count(), 1028);
    let i4s4 = p.probe("user_trace__i4s4").unwrap();
    assert_eq!(
        i4s4.prototype(),
        "user_trace__i4s4(char *proc, char *user_tag, int64_t i1, int64_t i2, int64_t i3, int64_t i4, \
         char *s1, char *s2, char *s3, char *s4)"
    );
    let n = p.probe("user_trace__n").unwrap();
    assert_eq!(n.labels, Some((0, 950)));
    assert_eq!(n.args, i4s4.args);
    assert_eq!(n.note_names().last().unwrap(), "user_trace__n950");
    assert_eq!(p.probe("efile_drv__entry").unwrap().args.len(), 11);
    assert_eq!(p.probe("efile_drv__return").unwrap().args[4], Arg { name: "success".into(), ty: Type::I32 });
    assert!(p.probe("user_trace__s1").unwrap().doc.starts_with("dtrace:user_trace_s1/1"));
}

#[test]
fn argument_k_is_in_the_same_register_in_every_probe() {
    let p = parse(&probes_d()).unwrap().provider;
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for probe in &p.probes {
            for (k, a) in probe.args.iter().enumerate() {
                let note = arch.note_arg(k, a.ty).unwrap();
                let reg = arch.register(k).unwrap();
                // The note names the register or, for a 32-bit
                // argument, its 32-bit view.
                let named = note.split('@').nth(1).unwrap().trim_start_matches('%');
                let view32 = match arch {
                    Arch::X86_64 if reg.starts_with("r") && reg.len() <= 3 && reg.as_bytes()[1].is_ascii_digit() => {
                        format!("{reg}d")
                    }
                    Arch::X86_64 => format!("e{}", &reg[1..]),
                    Arch::Aarch64 => format!("w{}", &reg[1..]),
                };
                assert!(named == reg || named == view32, "{} arg{k}: {note} vs {reg}", probe.name);
            }
        }
    }
}

#[test]
fn note_arguments_follow_the_declared_types() {
    let a = Arch::X86_64;
    assert_eq!(a.note_arg(0, Type::String).unwrap(), "8@%rdi");
    assert_eq!(a.note_arg(2, Type::I64).unwrap(), "-8@%rdx");
    assert_eq!(a.note_arg(6, Type::I32).unwrap(), "-4@%r10d");
    assert_eq!(a.note_arg(11, Type::U64).unwrap(), "8@%r15");
    assert_eq!(a.note_arg(3, Type::U32).unwrap(), "4@%ecx");
    assert_eq!(a.note_arg(12, Type::I64), None);
    let b = Arch::Aarch64;
    assert_eq!(b.note_arg(0, Type::String).unwrap(), "8@x0");
    assert_eq!(b.note_arg(7, Type::I32).unwrap(), "-4@w7");
    assert_eq!(b.note_arg(11, Type::I64).unwrap(), "-8@x11");
    assert_eq!(a.note_args(&[Type::String, Type::String, Type::I64]).unwrap(), "8@%rdi 8@%rsi -8@%rdx");
}

#[test]
fn bad_provider_files_say_what_and_where() {
    let cases = [
        ("provider p { probe a(long x); };", "unsupported type 'long'"),
        ("provider p { probe a(int64_t); };", "needs a type and a name"),
        ("provider p { probe a(int x, int x); };", "declared twice"),
        ("provider p { probe a(); probe a(); };", "probe a declared twice"),
        (
            "provider p {\n probe a(int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, \
          int a9, int a10, int a11, int a12); };",
            "at most 12",
        ),
        ("provider p { probe 9a(); };", "\"9a\" is not a C identifier"),
        ("provider p { probe a() };", "expected ';'"),
        ("provider p {\n#pragma dtrace_nif numbered n 0 2\n probe m(); };", "followed by probe m"),
        ("provider p {\n#pragma dtrace_nif numbered n 0 2\n probe n(); probe n1(); };", "n1 declared twice"),
        ("provider p {\n#pragma dtrace_nif numbered n 5 2\n probe n(); };", "bad label range"),
        ("#include <x.h>\nprovider p { };", "unsupported directive"),
        ("provider p { }; provider q { };", "one SDT provider"),
        ("", "no provider"),
        ("provider p { probe a(int x); ", "expected 'probe'"),
        ("provider p { probe a(int x); }; /* open", "unterminated comment"),
    ];
    for (src, wanted) in cases {
        let e = parse(src).expect_err(src);
        assert!(e.to_string().contains(wanted), "{src:?}: {e}");
    }
}

#[test]
fn ds_own_pragmas_and_line_comments_are_ignored() {
    let p = parse("#pragma D attributes Evolving/Evolving/Common provider p\n// x\nprovider p {\n// y\nprobe a(const char * s, unsigned int u);\n};").unwrap().provider;
    assert_eq!(
        p.probes[0].args,
        vec![Arg { name: "s".into(), ty: Type::String }, Arg { name: "u".into(), ty: Type::U32 }]
    );
    assert_eq!(p.probes[0].doc, "");
}

#[test]
fn lttng_pragmas_mark_the_probes_that_are_also_events() {
    let p = parse("provider p {\n#pragma dtrace_nif lttng org_x\nprobe a(); probe b__c();\n#pragma dtrace_nif lttng off\nprobe d(); };").unwrap().provider;
    let marks: Vec<_> = p.probes.iter().map(|q| q.lttng.as_deref()).collect();
    assert_eq!(marks, [Some("org_x"), Some("org_x"), None]);
    assert_eq!(p.probes[1].lttng_event(), "b_c");
    assert!(parse("provider p {\n#pragma dtrace_nif lttng a-b\n};").is_err());
    let lib = parse(&probes_d()).unwrap().provider;
    assert_eq!(lib.probe("user_trace__n").unwrap().lttng.as_deref(), Some("org_erlang_dtrace"));
    assert_eq!(lib.probe("efile_drv__entry").unwrap().lttng.as_deref(), Some("org_erlang_dtrace"));
    assert_eq!(lib.probe("message__send").unwrap().lttng, None);
    let fields =
        |name: &str| -> Vec<String> { lib.probe(name).unwrap().lttng_fields().into_iter().map(|(n, _)| n).collect() };
    assert_eq!(fields("user_trace__n")[..3], ["label", "proc", "user_tag"]);
    assert_eq!(fields("efile_drv__return").last().map(String::as_str), Some("errnum"));
}

#[test]
fn c_identifiers() {
    for ok in ["a", "_a", "user_trace__n0", "A9_"] {
        assert!(is_c_identifier(ok), "{ok}");
    }
    for bad in ["", "9a", "a-b", "a/b", "../x", "a b", "é"] {
        assert!(!is_c_identifier(bad), "{bad}");
    }
}
