//! The key template: `"order:{order.id}"` becomes `format!("order:{}", order.id)`, with every
//! placeholder checked against the function's arguments at compile time.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use syn::{Expr, LitStr, Member};

/// The template's format string (placeholders as `{}`) and one expression per placeholder,
/// spanned at the key literal so that type errors (no such field) point at it.
pub(crate) struct Key {
    pub(crate) format: String,
    pub(crate) args: Vec<TokenStream>,
}

/// Parses `lit` against the function's argument names (`self` included for methods).
pub(crate) fn parse(lit: &LitStr, arguments: &[String]) -> syn::Result<Key> {
    let text = lit.value();
    let span = lit.span();
    // What the library refuses whatever the placeholders' values (`keys.rs`).
    if text.is_empty() {
        return Err(syn::Error::new(span, "the key is empty"));
    }
    if text.starts_with("}}") {
        return Err(syn::Error::new(
            span,
            "a lock name must not start with `}` (it would empty the key's cluster hash tag)",
        ));
    }
    let mut format = String::with_capacity(text.len());
    let mut args = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                format.push_str("{{");
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                format.push_str("}}");
            }
            '{' => {
                let mut inner = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    inner.push(c);
                }
                if !closed {
                    return Err(syn::Error::new(
                        span,
                        "unclosed `{` in key (write `{{` for a brace)",
                    ));
                }
                args.push(placeholder(inner.trim(), arguments, span)?);
                format.push_str("{}");
            }
            '}' => {
                return Err(syn::Error::new(
                    span,
                    "unmatched `}` in key (write `}}` for a brace)",
                ));
            }
            c => format.push(c),
        }
    }
    Ok(Key { format, args })
}

/// One `{...}`: an argument, then `.field`, `.0` or `.method()` (no arguments) any number of times.
fn placeholder(text: &str, arguments: &[String], span: Span) -> syn::Result<TokenStream> {
    if text.is_empty() {
        return Err(syn::Error::new(
            span,
            format!(
                "empty `{{}}` in key: name an argument ({})",
                list(arguments)
            ),
        ));
    }
    let expr: Expr = syn::parse_str(text).map_err(|_| {
        syn::Error::new(
            span,
            format!(
                "`{{{text}}}` in key: write an argument, then `.field` or `.method()` ({})",
                list(arguments)
            ),
        )
    })?;
    let root = root(&expr).ok_or_else(|| {
        syn::Error::new(
            span,
            format!(
                "`{{{text}}}` in key: only `arg`, `arg.field` and `arg.method()` are allowed ({})",
                list(arguments)
            ),
        )
    })?;
    if !arguments.contains(&root) {
        return Err(syn::Error::new(
            span,
            format!(
                "unknown argument `{root}` in key `{{{text}}}`; {}",
                list(arguments)
            ),
        ));
    }
    Ok(respan(quote::quote!((#expr)), span))
}

/// The argument an allowed placeholder starts from, or `None` for any other expression.
fn root(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => {
            p.path.get_ident().map(|i| i.to_string())
        }
        Expr::Field(f) => match &f.member {
            Member::Named(_) | Member::Unnamed(_) => root(&f.base),
        },
        Expr::MethodCall(m) if m.args.is_empty() && m.turbofish.is_none() => root(&m.receiver),
        _ => None,
    }
}

fn list(arguments: &[String]) -> String {
    if arguments.is_empty() {
        "the function has no named arguments".to_owned()
    } else {
        format!("the function's arguments are: {}", arguments.join(", "))
    }
}

/// Gives every token `span`, so the argument names resolve as the user's and errors point at
/// the key.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                TokenTree::Group(group)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> syn::Result<Key> {
        let args = ["self", "order", "day"].map(String::from);
        parse(&LitStr::new(text, Span::call_site()), &args)
    }

    fn error(text: &str) -> String {
        match key(text) {
            Ok(k) => panic!("`{text}` was accepted as {}", k.format),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn placeholders_become_positional_arguments() {
        let k = key("order:{order.id}:{ order.region() }:{self.shop}:{day}").unwrap();
        assert_eq!(k.format, "order:{}:{}:{}:{}");
        let args: Vec<String> = k.args.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            args,
            [
                "(order . id)",
                "(order . region ())",
                "(self . shop)",
                "(day)"
            ]
        );
    }

    #[test]
    fn doubled_braces_stay_braces() {
        let k = key("{{literal}}:{day}").unwrap();
        assert_eq!(k.format, "{{literal}}:{}");
        assert_eq!(k.args.len(), 1);
        assert_eq!(key("plain").unwrap().format, "plain");
    }

    #[test]
    fn bad_placeholders_are_rejected_with_the_arguments_listed() {
        assert_eq!(
            error("{ordr.id}"),
            "unknown argument `ordr` in key `{ordr.id}`; the function's arguments are: self, order, day"
        );
        assert!(error("{}").starts_with("empty `{}` in key"));
        assert!(error("{day").starts_with("unclosed `{`"));
        assert!(error("day}").starts_with("unmatched `}`"));
        assert!(error("{order.get(1)}").contains("only `arg`, `arg.field` and `arg.method()`"));
        assert!(error("{day + 1}").contains("only `arg`"));
        assert!(error("{day:04}").contains("write an argument"));
    }

    /// Names the library refuses on every call are refused when the code is compiled.
    #[test]
    fn names_the_library_refuses_are_compile_errors() {
        assert_eq!(error(""), "the key is empty");
        assert!(error("}}x:{day}").contains("must not start with `}`"));
        assert_eq!(key("x}}:{day}").unwrap().format, "x}}:{}");
    }
}
