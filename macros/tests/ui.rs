//! Compile errors of `#[redlease::locked]`: each `ui/*.rs` must fail to build with the message
//! in its `.stderr`. Regenerate them with `TRYBUILD=overwrite` after a compiler update.

#[test]
fn misuse_is_a_compile_error() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
