//! The expansion: the function's body runs through `Lock::run` / `Lock::try_run`.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Pat, ReturnType};

use crate::key;
use crate::options::{Busy, Options};

/// The names a key may use: the receiver as `self`, and every argument bound to a plain name.
fn argument_names(function: &ItemFn) -> Vec<String> {
    let mut names = Vec::new();
    for input in &function.sig.inputs {
        match input {
            FnArg::Receiver(_) => names.push("self".to_owned()),
            FnArg::Typed(typed) => {
                if let Pat::Ident(p) = &*typed.pat {
                    names.push(p.ident.to_string());
                }
            }
        }
    }
    names
}

fn duration(d: Duration) -> TokenStream {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    quote!(::core::time::Duration::new(#secs, #nanos))
}

pub(crate) fn expand(options: Options, function: ItemFn) -> syn::Result<TokenStream> {
    let sig = &function.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span(),
            "#[redlease::locked] goes on an `async fn`: the lock is taken and released with \
             `.await`",
        ));
    }
    let ReturnType::Type(_, ret) = &sig.output else {
        return Err(syn::Error::new(
            sig.ident.span(),
            "a #[redlease::locked] fn must return `Result<T, E>` with `E: From<redlease::Error>`: \
             taking the lock can fail (Redis unreachable, the lease lost)",
        ));
    };
    if let syn::Type::ImplTrait(_) = &**ret {
        return Err(syn::Error::new(
            ret.span(),
            "a #[redlease::locked] fn must name its return type (`Result<T, E>`), not `impl Trait`",
        ));
    }
    let key = key::parse(&options.key, &argument_names(&function))?;

    let name = own("name");
    let client = own("client");
    let lock = own("lock");
    let body = own("body");
    let held = own("held");
    let error = own("error");
    let value = own("value");

    // Lock errors leave through the fn's error type; `into` is spanned at the return type,
    // which a missing `From<redlease::Error>` then points at.
    let into = syn::Ident::new("into", ret.span());
    let fail = quote! {
        ::core::result::Result::Err(#error.#into())
    };
    let format = &key.format;
    let key_args = &key.args;
    let client_expr = &options.client;
    let client_binding = quote_spanned! {client_expr.span()=>
        let #client: &::redlease::Client = &(#client_expr);
    };
    let fenced = options.fenced.then(|| quote!(.fenced(true)));
    let bind_held = match &options.held {
        Some(user) => quote!(let #user: ::redlease::HeldLock = #held;),
        None => quote!(let _ = #held;),
    };
    let block = &function.block;

    let run = match (options.wait, options.lease) {
        (None, None) => quote! {
            match #lock.run(#body).await {
                ::core::result::Result::Ok(#value) => #value,
                ::core::result::Result::Err(#error) => #fail,
            }
        },
        // Waiting without limit under a fixed lease: `try_run` without a wait, whose `None`
        // means what `run` makes of it (the client shut down).
        (None, Some(lease)) => {
            let lease = duration(lease.value);
            quote! {
                match #lock.try_run(::redlease::LockOptions::new().lease(#lease), #body).await {
                    ::core::result::Result::Ok(::core::option::Option::Some(#value)) => #value,
                    ::core::result::Result::Ok(::core::option::Option::None) => {
                        let #error = ::redlease::Error::Shutdown;
                        #fail
                    }
                    ::core::result::Result::Err(#error) => #fail,
                }
            }
        }
        (Some(wait), _) => {
            let busy = match &options.busy {
                Busy::Skip(expr) => quote_spanned!(expr.span()=> #expr),
                Busy::Error | Busy::Wait => {
                    let waited = duration(wait.value);
                    quote! {{
                        let #error = ::redlease::Error::Busy {
                            name: #name.clone(),
                            waited: #waited,
                        };
                        #fail
                    }}
                }
            };
            tries(&options, wait.value, busy, &fail)
        }
    };

    let attrs = &function.attrs;
    let vis = &function.vis;
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            let #name: ::std::string::String = ::std::format!(#format #(, #key_args)*);
            let #lock = {
                #client_binding
                match #client.lock(&#name) {
                    ::core::result::Result::Ok(#lock) => #lock #fenced,
                    ::core::result::Result::Err(#error) => return #fail,
                }
            };
            let #body = move |#held: ::redlease::HeldLock| async move {
                #bind_held
                ::core::convert::identity::<#ret>(#block)
            };
            #run
        }
    })
}

/// A name of the expansion's own, `__redlease_<name>`: invisible to the body (mixed-site
/// hygiene).
fn own(name: &str) -> syn::Ident {
    syn::Ident::new(&format!("__redlease_{name}"), Span::mixed_site())
}

/// `try_run` once, then again after each pause up to `retries` times; `busy` when every try
/// found the lock held. The body closure sits in an `Option` so that a try which did not run it
/// leaves it for the next.
fn tries(options: &Options, wait: Duration, busy: TokenStream, fail: &TokenStream) -> TokenStream {
    let lock = own("lock");
    let body = own("body");
    let slot = own("slot");
    let held = own("held");
    let error = own("error");
    let value = own("value");
    let outcome = own("outcome");
    let tried = own("tried");
    let wait = duration(wait);
    let lease = options.lease.map(|l| {
        let l = duration(l.value);
        quote!(.lease(#l))
    });
    let attempt = quote! {
        let #outcome = #lock
            .try_run(
                ::redlease::LockOptions::new().wait(#wait) #lease,
                |#held: ::redlease::HeldLock| match #slot.take() {
                    ::core::option::Option::Some(#body) => #body(#held),
                    ::core::option::Option::None => ::core::unreachable!(),
                },
            )
            .await;
        match #outcome {
            ::core::result::Result::Ok(::core::option::Option::Some(#value)) => return #value,
            ::core::result::Result::Ok(::core::option::Option::None) => {}
            ::core::result::Result::Err(#error) => return #fail,
        }
    };
    let retries = options.retries;
    let pause = duration(options.pause);
    let again = (retries > 0).then(|| {
        quote! {
            let mut #tried: u32 = 0;
            while #tried < #retries {
                #tried += 1;
                ::redlease::__macro_support::sleep(#pause).await;
                #attempt
            }
        }
    });
    quote! {{
        let mut #slot = ::core::option::Option::Some(#body);
        #attempt
        #again
        #busy
    }}
}
