//! `#[derive(Label)]` for [shardcount](https://docs.rs/shardcount)'s
//! typed labels. Use it through shardcount (its default `derive` feature
//! re-exports it as `shardcount::Label`, next to the trait of that name);
//! the trait's documentation describes what the derive generates and what
//! it refuses.
//!
//! ```ignore
//! use shardcount::{Label, LabelledCounter};
//!
//! #[derive(Clone, Copy, Label)]
//! enum Route { Home, Checkout }
//!
//! static REQUESTS: LabelledCounter<Route> = LabelledCounter::new();
//! REQUESTS.inc(Route::Checkout);
//! ```

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Data, DeriveInput, Fields, Ident, LitStr};

/// Implements `shardcount::Label` for a fieldless enum (one label; its
/// values are the variants, in declaration order) or for a struct with
/// named fields that are all one-label types (one label per field, the
/// field's name; its index is the fields' indices in mixed radix, the
/// first field the most significant).
///
/// Attributes, all `#[label(...)]`:
///
/// * on an enum: `name = "..."`, the label's name (default: the type's
///   name in snake case);
/// * on a variant: `rename = "..."`, its text, not empty and without a
///   comma (default: its name in snake case, a run of capitals kept as
///   one word: `HTTPError` is `http_error`, `IPv6` is `i_pv6`, so rename
///   such names);
/// * on a struct field: `name = "..."`, the label's name (default: the
///   field's name).
#[proc_macro_derive(Label, attributes(label))]
pub fn derive_label(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The impl for `input`, or the error that says why it cannot be a label.
fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let generics = &input.generics;
    if !generics.params.is_empty() || generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            generics,
            "#[derive(Label)] does not take generic types: a label's values, names and \
             texts are fixed when the type is declared",
        ));
    }
    match &input.data {
        Data::Enum(e) => expand_enum(input, e),
        Data::Struct(s) => expand_struct(input, s),
        Data::Union(_) => Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Label)] takes a fieldless enum or a struct of labels, not a union",
        )),
    }
}

/// `name` in lower snake case: `CheckoutV2` is `checkout_v2`, `HTTPError`
/// is `http_error`.
fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.trim_start_matches("r#").chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if prev != '_'
                && (prev.is_lowercase()
                    || prev.is_ascii_digit()
                    || (prev.is_uppercase() && next_lower))
            {
                out.push('_');
            }
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// Whether `name` can be a label name in every exposition format the
/// integrations write (Prometheus's `[a-zA-Z_][a-zA-Z0-9_]*`, not
/// starting with its reserved `__`).
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    !name.starts_with("__")
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The one `key = "..."` in the `#[label(...)]` attributes of `attrs`, if
/// any; any other key is an error naming the one allowed here.
fn label_attr(attrs: &[syn::Attribute], key: &str) -> syn::Result<Option<LitStr>> {
    let mut found = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("label")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident(key) {
                found = Some(meta.value()?.parse::<LitStr>()?);
                Ok(())
            } else {
                Err(meta.error(format!(
                    "unknown label attribute: expected `{key} = \"...\"` here"
                )))
            }
        })?;
    }
    Ok(found)
}

/// A label name from an attribute or its default, checked.
fn label_name(lit: Option<LitStr>, default: String, span: Span) -> syn::Result<String> {
    let (name, span) = match lit {
        Some(lit) => (lit.value(), lit.span()),
        None => (default, span),
    };
    if valid_name(&name) {
        Ok(name)
    } else {
        Err(syn::Error::new(
            span,
            format!(
                "label name {name:?} is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, \
                 not starting with `__`)"
            ),
        ))
    }
}

fn expand_enum(input: &DeriveInput, e: &syn::DataEnum) -> syn::Result<TokenStream> {
    let ty = &input.ident;
    if e.variants.is_empty() {
        return Err(syn::Error::new_spanned(
            ty,
            "#[derive(Label)] needs at least one variant: an empty enum has no value to count",
        ));
    }
    let name = label_name(
        label_attr(&input.attrs, "name")?,
        snake_case(&ty.to_string()),
        ty.span(),
    )?;
    let mut variants = Vec::new();
    let mut texts: Vec<String> = Vec::new();
    for v in &e.variants {
        if !matches!(v.fields, Fields::Unit) {
            return Err(syn::Error::new_spanned(
                v,
                "#[derive(Label)] takes fieldless variants only: a label value is one of a \
                 fixed set (make the data a separate label, or a struct of labels)",
            ));
        }
        let text = match label_attr(&v.attrs, "rename")? {
            Some(lit) if lit.value().is_empty() => {
                return Err(syn::Error::new_spanned(
                    lit,
                    "a label's text cannot be empty: Prometheus reads an empty value as no \
                     label, so this series could not be told from an unlabelled one",
                ));
            }
            Some(lit) if lit.value().contains(',') => {
                return Err(syn::Error::new_spanned(
                    lit,
                    "a label's text cannot hold a comma: the exporter's keys and serde's \
                     snapshots join a member's texts with commas, so two members could \
                     read alike",
                ));
            }
            Some(lit) => lit.value(),
            None => snake_case(&v.ident.to_string()),
        };
        if texts.contains(&text) {
            return Err(syn::Error::new_spanned(
                &v.ident,
                format!("two variants have the text {text:?}: their counts could not be told apart when exported"),
            ));
        }
        texts.push(text);
        variants.push(&v.ident);
    }
    let count = variants.len();
    let indices = 0..count;
    let indices2 = 0..count;
    let indices3 = 0..count;
    Ok(quote! {
        impl ::shardcount::Label for #ty {
            const COUNT: usize = #count;
            const NAMES: &'static [&'static str] = &[#name];

            #[inline]
            fn index(&self) -> usize {
                match self {
                    #(Self::#variants => #indices,)*
                }
            }

            fn from_index(index: usize) -> ::core::option::Option<Self> {
                match index {
                    #(#indices2 => ::core::option::Option::Some(Self::#variants),)*
                    _ => ::core::option::Option::None,
                }
            }

            fn text(index: usize, dim: usize) -> ::core::option::Option<&'static str> {
                match (index, dim) {
                    #((#indices3, 0) => ::core::option::Option::Some(#texts),)*
                    _ => ::core::option::Option::None,
                }
            }
        }
    })
}

fn expand_struct(input: &DeriveInput, s: &syn::DataStruct) -> syn::Result<TokenStream> {
    let ty = &input.ident;
    let Fields::Named(fields) = &s.fields else {
        return Err(syn::Error::new_spanned(
            ty,
            "#[derive(Label)] on a struct needs named fields: their names are the label names",
        ));
    };
    if fields.named.is_empty() {
        return Err(syn::Error::new_spanned(
            ty,
            "#[derive(Label)] needs at least one field: each field is one label",
        ));
    }
    if let Some(attr) = input.attrs.iter().find(|a| a.path().is_ident("label")) {
        return Err(syn::Error::new_spanned(
            attr,
            "a struct's label names are its field names: rename one with \
             #[label(name = \"...\")] on the field",
        ));
    }
    let mut idents: Vec<&Ident> = Vec::new();
    let mut types = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for f in &fields.named {
        let ident = f.ident.as_ref().expect("named fields have names");
        let name = label_name(
            label_attr(&f.attrs, "name")?,
            ident.to_string().trim_start_matches("r#").to_owned(),
            ident.span(),
        )?;
        if names.contains(&name) {
            return Err(syn::Error::new_spanned(
                ident,
                format!("two fields have the label name {name:?}"),
            ));
        }
        names.push(name);
        idents.push(ident);
        types.push(&f.ty);
    }
    let label = quote!(::shardcount::Label);
    // Field k's stride: the product of the counts of the fields after it.
    let strides: Vec<TokenStream> = (0..types.len())
        .map(|k| {
            let later = &types[k + 1..];
            quote!(1usize #(* <#later as #label>::COUNT)*)
        })
        .collect();
    let dims = 0..types.len();
    let checks = idents.iter().zip(&types).map(|(ident, t)| {
        let msg = format!(
            "#[derive(Label)]: field `{ident}` of `{ty}` must have a one-label type (a derived enum), \
             as each field is one label"
        );
        quote! {
            if <#t as #label>::NAMES.len() != 1 {
                ::core::panic!(#msg);
            }
        }
    });
    let overflow = format!("#[derive(Label)]: `{ty}` has more values than a usize counts");
    let first_ident = idents[0];
    let first_ty = types[0];
    let rest_idents = &idents[1..];
    let rest_types = &types[1..];
    Ok(quote! {
        const _: () = {
            #(#checks)*
        };

        // A field of one value makes `% COUNT` a `% 1`, which clippy
        // denies in the user's crate.
        #[automatically_derived]
        #[allow(clippy::modulo_one)]
        impl #label for #ty {
            const COUNT: usize = {
                let mut n = <#first_ty as #label>::COUNT;
                #(
                    n = match n.checked_mul(<#rest_types as #label>::COUNT) {
                        ::core::option::Option::Some(n) => n,
                        ::core::option::Option::None => ::core::panic!(#overflow),
                    };
                )*
                n
            };
            const NAMES: &'static [&'static str] = &[#(#names),*];

            #[inline]
            fn index(&self) -> usize {
                let i = ::shardcount::__private::member_index(&self.#first_ident);
                #(
                    let i = i * <#rest_types as #label>::COUNT
                        + ::shardcount::__private::member_index(&self.#rest_idents);
                )*
                i
            }

            fn from_index(index: usize) -> ::core::option::Option<Self> {
                if index >= <Self as #label>::COUNT {
                    return ::core::option::Option::None;
                }
                ::core::option::Option::Some(Self {
                    #(
                        #idents: <#types as #label>::from_index(
                            index / (#strides) % <#types as #label>::COUNT,
                        )?,
                    )*
                })
            }

            fn text(index: usize, dim: usize) -> ::core::option::Option<&'static str> {
                if index >= <Self as #label>::COUNT {
                    return ::core::option::Option::None;
                }
                match dim {
                    #(
                        #dims => <#types as #label>::text(
                            index / (#strides) % <#types as #label>::COUNT,
                            0,
                        ),
                    )*
                    _ => ::core::option::Option::None,
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(src: &str) -> String {
        let input: DeriveInput = syn::parse_str(src).unwrap();
        expand(&input).unwrap_err().to_string()
    }

    #[test]
    fn snake_case_names() {
        let cases = [
            ("Home", "home"),
            ("CheckoutV2", "checkout_v2"),
            ("HTTPError", "http_error"),
            ("NotFound404", "not_found404"),
            ("Get", "get"),
            ("A", "a"),
            ("HttpMethod", "http_method"),
            ("r#Type", "type"),
        ];
        for (name, snake) in cases {
            assert_eq!(snake_case(name), snake, "{name}");
        }
    }

    #[test]
    fn rejections_say_why() {
        assert!(error("enum E { A(u8), B }").contains("fieldless variants only"));
        assert!(error("enum E { A { x: u8 } }").contains("fieldless variants only"));
        assert!(error("enum E {}").contains("at least one variant"));
        assert!(error(r#"enum E { #[label(rename = "")] A }"#).contains("cannot be empty"));
        assert!(error(r#"enum E { #[label(rename = "1,000+")] A }"#).contains("comma"));
        assert!(error("enum E<T> { A, B(T) }").contains("generic"));
        assert!(error("struct S<T> { a: T }").contains("generic"));
        assert!(error("enum E where u8: Copy { A }").contains("generic"));
        assert!(error("struct S(u8);").contains("named fields"));
        assert!(error("struct S;").contains("named fields"));
        assert!(error("struct S {}").contains("at least one field"));
        assert!(error("union U { a: u8 }").contains("not a union"));
        assert!(
            error("enum E { #[label(rename = \"x\")] A, #[label(rename = \"x\")] B }")
                .contains("text \"x\"")
        );
        assert!(error("#[label(name = \"a-b\")] enum E { A }").contains("not a valid label name"));
        assert!(error("#[label(name = \"__a\")] enum E { A }").contains("not starting with `__`"));
        assert!(error("#[label(nme = \"a\")] enum E { A }").contains("expected `name"));
        assert!(error("#[label(name = \"s\")] struct S { a: A }").contains("field names"));
    }

    #[test]
    fn accepted_shapes_expand() {
        for src in [
            "enum E { A, B }",
            "#[label(name = \"route\")] enum E { #[label(rename = \"v2\")] A, B }",
            "struct S { method: M, #[label(name = \"code\")] status: St }",
        ] {
            let input: DeriveInput = syn::parse_str(src).unwrap();
            let out = expand(&input).unwrap().to_string();
            assert!(out.contains("impl :: shardcount :: Label for"), "{out}");
        }
    }
}
