//! The attribute's options (`key = "...", client = ..., wait = "5s", ...`), parsed and checked.

use std::time::Duration;

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, MetaNameValue, Token};

const KNOWN: &str = "key, client, wait, lease, busy, retries, pause, on_lost, held, fenced";

/// What to do when the lock could not be taken within the wait (after the retries).
pub(crate) enum Busy {
    /// Wait as long as it takes (`Lock::run`).
    Wait,
    /// Return this expression instead of running the body.
    Skip(Expr),
    /// Return `Err(From::from(redlease::Error::Busy { .. }))`.
    Error,
}

/// A duration literal parsed at compile time, with the literal's span for errors.
#[derive(Clone, Copy)]
pub(crate) struct Dur {
    pub(crate) value: Duration,
    pub(crate) span: Span,
}

pub(crate) struct Options {
    pub(crate) key: LitStr,
    pub(crate) client: Expr,
    /// `None` with [`Busy::Wait`]; with another policy, zero (one attempt) unless given.
    pub(crate) wait: Option<Dur>,
    pub(crate) lease: Option<Dur>,
    pub(crate) busy: Busy,
    pub(crate) retries: u32,
    pub(crate) pause: Duration,
    pub(crate) held: Option<Ident>,
    pub(crate) fenced: bool,
}

/// The options as written, before the checks that need all of them.
#[derive(Default)]
struct Raw {
    key: Option<LitStr>,
    client: Option<Expr>,
    wait: Option<Dur>,
    lease: Option<Dur>,
    busy: Option<(Busy, Span)>,
    retries: Option<(u32, Span)>,
    pause: Option<Dur>,
    held: Option<Ident>,
    fenced: Option<bool>,
    on_lost: Option<()>,
}

impl Parse for Options {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let pairs = Punctuated::<MetaNameValue, Token![,]>::parse_terminated(input)?;
        let mut raw = Raw::default();
        for pair in pairs {
            raw.set(pair)?;
        }
        raw.finish()
    }
}

impl Raw {
    fn set(&mut self, pair: MetaNameValue) -> syn::Result<()> {
        let Some(name) = pair.path.get_ident() else {
            return Err(unknown(&pair.path));
        };
        let value = pair.value;
        let text = name.to_string();
        let duplicate = match text.as_str() {
            "key" => self.key.replace(lit_str(&value, "key")?).is_some(),
            "client" => self.client.replace(value).is_some(),
            "wait" => self.wait.replace(duration(&value, "wait")?).is_some(),
            "lease" => {
                let lease = duration(&value, "lease")?;
                // A lease is whole milliseconds on the server.
                if lease.value.as_millis() == 0 {
                    return Err(syn::Error::new(lease.span, "`lease` must be at least 1ms"));
                }
                self.lease.replace(lease).is_some()
            }
            "pause" => self.pause.replace(duration(&value, "pause")?).is_some(),
            "busy" => {
                let span = value.span();
                self.busy.replace((busy(value)?, span)).is_some()
            }
            "retries" => {
                let retries = int(&value)?;
                self.retries.replace((retries, value.span())).is_some()
            }
            "on_lost" => self.on_lost.replace(on_lost(&value)?).is_some(),
            "held" => self.held.replace(ident(&value, "held")?).is_some(),
            "fenced" => self.fenced.replace(boolean(&value)?).is_some(),
            _ => return Err(unknown(&pair.path)),
        };
        if duplicate {
            return Err(syn::Error::new(
                name.span(),
                format!("`{text}` is given twice"),
            ));
        }
        Ok(())
    }

    fn finish(self) -> syn::Result<Options> {
        let Some(key) = self.key else {
            return Err(syn::Error::new(
                Span::call_site(),
                "missing `key = \"...\"`: the lock name, e.g. `key = \"order:{order.id}\"`",
            ));
        };
        if key.value().is_empty() {
            return Err(syn::Error::new(key.span(), "the key must not be empty"));
        }
        let Some(client) = self.client else {
            return Err(syn::Error::new(
                Span::call_site(),
                "missing `client = ...`: the redlease::Client to lock with (an argument, \
                 `self.field`, a static or a call returning `&Client`)",
            ));
        };
        let (busy, busy_span) = self.busy.unwrap_or((Busy::Wait, Span::call_site()));
        if let Busy::Wait = busy {
            if let Some(wait) = self.wait {
                return Err(syn::Error::new(
                    wait.span,
                    "`wait` needs `busy = skip(...)` or `busy = error`: what to return when the \
                     wait runs out",
                ));
            }
            if let Some((_, span)) = self.retries {
                return Err(syn::Error::new(
                    span,
                    "`retries` needs `busy = skip(...)` or `busy = error`: with `busy = wait` \
                     there is nothing to retry",
                ));
            }
        }
        let retries = self.retries.map_or(0, |(n, _)| n);
        if let (Some(pause), 0) = (self.pause, retries) {
            return Err(syn::Error::new(
                pause.span,
                "`pause` needs `retries = N`: it is the pause between tries",
            ));
        }
        let wait = match busy {
            Busy::Wait => None,
            _ => Some(self.wait.unwrap_or(Dur {
                value: Duration::ZERO,
                span: busy_span,
            })),
        };
        Ok(Options {
            key,
            client,
            wait,
            lease: self.lease,
            busy,
            retries,
            pause: self.pause.map_or(Duration::from_millis(100), |p| p.value),
            held: self.held,
            fenced: self.fenced.unwrap_or(false),
        })
    }
}

fn unknown(path: &syn::Path) -> syn::Error {
    let name = quote::ToTokens::to_token_stream(path).to_string();
    syn::Error::new(
        path.span(),
        format!("unknown option `{name}`; the options are: {KNOWN}"),
    )
}

fn lit_str(value: &Expr, what: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        _ => Err(syn::Error::new(
            value.span(),
            format!("`{what}` takes a string literal"),
        )),
    }
}

/// The library's bound on every duration (`redlease::MAX_DURATION`: the macro crate cannot
/// depend on the library, which re-exports it).
const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

/// A humantime literal: `"5s"`, `"100ms"`, `"1m 30s"`, `"2h"`; at most 365 days (the library's
/// bound, which would refuse a longer one on every call).
fn duration(value: &Expr, what: &str) -> syn::Result<Dur> {
    let lit = lit_str(value, what)?;
    match humantime::parse_duration(&lit.value()) {
        Ok(d) if d > MAX_DURATION => Err(syn::Error::new(
            lit.span(),
            format!("`{what}` is at most 365 days"),
        )),
        Ok(d) => Ok(Dur {
            value: d,
            span: lit.span(),
        }),
        Err(e) => Err(syn::Error::new(
            lit.span(),
            format!("bad duration for `{what}`: {e} (write e.g. \"5s\", \"100ms\", \"1m 30s\")"),
        )),
    }
}

fn int(value: &Expr) -> syn::Result<u32> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(n), ..
        }) => n.base10_parse(),
        _ => Err(syn::Error::new(
            value.span(),
            "`retries` takes an integer literal",
        )),
    }
}

fn boolean(value: &Expr) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Ok(b.value),
        _ => Err(syn::Error::new(
            value.span(),
            "`fenced` takes `true` or `false`",
        )),
    }
}

fn ident(value: &Expr, what: &str) -> syn::Result<Ident> {
    match value {
        Expr::Path(p) if p.qself.is_none() => match p.path.get_ident() {
            Some(id) => Ok(id.clone()),
            None => Err(syn::Error::new(
                value.span(),
                format!("`{what}` takes a name"),
            )),
        },
        _ => Err(syn::Error::new(
            value.span(),
            format!("`{what}` takes a name"),
        )),
    }
}

fn busy(value: Expr) -> syn::Result<Busy> {
    const EXPECTED: &str = "`busy` is `wait`, `error` or `skip(<value to return>)`";
    match value {
        Expr::Path(p) if p.path.is_ident("wait") => Ok(Busy::Wait),
        Expr::Path(p) if p.path.is_ident("error") => Ok(Busy::Error),
        Expr::Call(call) => match &*call.func {
            Expr::Path(p) if p.path.is_ident("skip") && call.args.len() == 1 => {
                let mut args = call.args.into_iter();
                match args.next() {
                    Some(arg) => Ok(Busy::Skip(arg)),
                    None => Err(syn::Error::new(Span::call_site(), EXPECTED)),
                }
            }
            _ => Err(syn::Error::new(call.span(), EXPECTED)),
        },
        other => Err(syn::Error::new(other.span(), EXPECTED)),
    }
}

/// `Lock::run` cancels the body when the lease is lost and returns `Error::LeaseLost`; that is
/// the only behaviour it has, so `cancel` is the only value.
fn on_lost(value: &Expr) -> syn::Result<()> {
    match value {
        Expr::Path(p) if p.path.is_ident("cancel") => Ok(()),
        _ => Err(syn::Error::new(
            value.span(),
            "`on_lost` is `cancel` (the default): when the lease is lost the body is dropped at \
             its next `.await` and the fn returns `Err(From::from(redlease::Error::LeaseLost))`",
        )),
    }
}
