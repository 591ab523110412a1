//! The restricted user's RBAC is `deploy/kubernetes/provider-rbac.yaml`,
//! applied as-is (issue 21 part 3): the file's namespace is replaced by the
//! suite's, and the RoleBinding's subjects by the suite's restricted user.
//! So a verb the provider needs that the shipped file does not grant fails
//! the suite.
//!
//! The workspace has no YAML crate, so this reads the block-YAML subset the
//! file is written in — mappings, `- ` sequences, `[a, b]` flow sequences,
//! plain and quoted scalars, comments, `---` — into JSON, and from there into
//! the typed k8s-openapi objects. Anything outside the subset is an error
//! naming the line, never a silent misread.

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Map, Value};

/// The shipped file, compiled in.
pub const PROVIDER_RBAC_YAML: &str = include_str!("../../../deploy/kubernetes/provider-rbac.yaml");

struct Line<'a> {
    no: usize,
    indent: usize,
    text: &'a str,
}

fn strip_comment(l: &str) -> &str {
    let mut quote = None;
    for (i, c) in l.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if i == 0 || l[..i].ends_with(' ') => return &l[..i],
            _ => {}
        }
    }
    l
}

fn scalar(s: &str, no: usize) -> Result<Value> {
    let s = s.trim();
    if let Some(inner) = s.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .with_context(|| format!("line {no}: unterminated flow sequence"))?;
        if inner.trim().is_empty() {
            return Ok(Value::Array(vec![]));
        }
        return inner
            .split(',')
            .map(|p| scalar(p, no))
            .collect::<Result<Vec<_>>>()
            .map(Value::Array);
    }
    if s.starts_with(['{', '&', '*', '|', '>', '!']) {
        bail!("line {no}: {s:?} is outside the YAML subset this reader supports");
    }
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q) {
            let inner = inner
                .strip_suffix(q)
                .with_context(|| format!("line {no}: unterminated quote"))?;
            return Ok(Value::String(inner.to_string()));
        }
    }
    Ok(match s {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" | "~" | "" => Value::Null,
        _ => s
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(s.to_string())),
    })
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

fn node(lines: &mut Vec<Line<'_>>, i: &mut usize, indent: usize) -> Result<Value> {
    if is_item(lines[*i].text) {
        seq(lines, i, indent)
    } else {
        map(lines, i, indent)
    }
}

fn seq(lines: &mut Vec<Line<'_>>, i: &mut usize, indent: usize) -> Result<Value> {
    let mut out = Vec::new();
    while *i < lines.len() && lines[*i].indent == indent && is_item(lines[*i].text) {
        let rest = lines[*i].text[1..].trim_start();
        let no = lines[*i].no;
        if rest.is_empty() {
            *i += 1;
            match lines.get(*i) {
                Some(l) if l.indent > indent => {
                    let ind = l.indent;
                    out.push(node(lines, i, ind)?);
                }
                _ => out.push(Value::Null),
            }
        } else if key_split(rest).is_some() {
            // `- key: v` opens a mapping indented past the dash.
            let ind = indent + (lines[*i].text.len() - rest.len());
            lines[*i] = Line {
                no,
                indent: ind,
                text: rest,
            };
            out.push(map(lines, i, ind)?);
        } else {
            out.push(scalar(rest, no)?);
            *i += 1;
        }
    }
    Ok(Value::Array(out))
}

fn key_split(text: &str) -> Option<(&str, &str)> {
    if text.starts_with(['"', '\'', '[']) {
        return None;
    }
    if let Some(k) = text.strip_suffix(':') {
        return Some((k, ""));
    }
    text.split_once(": ")
}

fn map(lines: &mut Vec<Line<'_>>, i: &mut usize, indent: usize) -> Result<Value> {
    let mut out = Map::new();
    while *i < lines.len() && lines[*i].indent == indent && !is_item(lines[*i].text) {
        let (no, text) = (lines[*i].no, lines[*i].text);
        let (key, rest) = key_split(text).with_context(|| format!("line {no}: expected `key: value`"))?;
        *i += 1;
        let value = if !rest.trim().is_empty() {
            scalar(rest, no)?
        } else {
            match lines.get(*i) {
                Some(l) if l.indent > indent => {
                    let ind = l.indent;
                    node(lines, i, ind)?
                }
                // A sequence may sit at its key's own indent.
                Some(l) if l.indent == indent && is_item(l.text) => seq(lines, i, indent)?,
                _ => Value::Null,
            }
        };
        if out.insert(key.trim().to_string(), value).is_some() {
            bail!("line {no}: duplicate key {key:?}");
        }
    }
    if *i < lines.len() && lines[*i].indent > indent {
        bail!("line {}: unexpected indentation", lines[*i].no);
    }
    Ok(Value::Object(out))
}

/// Parses the documents of a block-YAML file (the subset above) into JSON.
pub fn parse_documents(yaml: &str) -> Result<Vec<Value>> {
    let mut docs = Vec::new();
    let mut current: Vec<Line<'_>> = Vec::new();
    let mut flush = |lines: &mut Vec<Line<'_>>| -> Result<()> {
        if !lines.is_empty() {
            let mut i = 0;
            let indent = lines[0].indent;
            let v = node(lines, &mut i, indent)?;
            if i != lines.len() {
                bail!("line {}: unexpected content", lines[i].no);
            }
            docs.push(v);
            lines.clear();
        }
        Ok(())
    };
    for (n, raw) in yaml.lines().enumerate() {
        if raw.contains('\t') {
            bail!("line {}: tabs are not YAML indentation", n + 1);
        }
        if raw.trim_end() == "---" {
            flush(&mut current)?;
            continue;
        }
        let text = strip_comment(raw).trim_end();
        if text.trim().is_empty() {
            continue;
        }
        let indent = text.len() - text.trim_start().len();
        current.push(Line {
            no: n + 1,
            indent,
            text: text.trim_start(),
        });
    }
    flush(&mut current)?;
    Ok(docs)
}

/// The file's objects, typed.
pub struct ProviderRbac {
    pub namespace: Namespace,
    pub service_account: ServiceAccount,
    pub role: Role,
    pub binding: RoleBinding,
    /// The optional cluster-scoped read of StorageClasses.
    pub cluster_role: Option<ClusterRole>,
    pub cluster_binding: Option<ClusterRoleBinding>,
}

/// Reads the shipped file into its objects (exactly one of each kind; the
/// cluster-scoped pair is optional).
pub fn provider_rbac() -> Result<ProviderRbac> {
    let (mut ns, mut sa, mut role, mut rb) = (None, None, None, None);
    let (mut cr, mut crb) = (None, None);
    for doc in parse_documents(PROVIDER_RBAC_YAML)? {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let dup = || anyhow::anyhow!("provider-rbac.yaml has two {kind} documents");
        match kind.as_str() {
            "Namespace" => ns
                .replace(serde_json::from_value(doc)?)
                .map_or(Ok(()), |_| Err(dup()))?,
            "ServiceAccount" => sa
                .replace(serde_json::from_value(doc)?)
                .map_or(Ok(()), |_| Err(dup()))?,
            "Role" => role
                .replace(serde_json::from_value(doc)?)
                .map_or(Ok(()), |_| Err(dup()))?,
            "RoleBinding" => rb
                .replace(serde_json::from_value(doc)?)
                .map_or(Ok(()), |_| Err(dup()))?,
            "ClusterRole" => cr
                .replace(serde_json::from_value(doc)?)
                .map_or(Ok(()), |_| Err(dup()))?,
            "ClusterRoleBinding" => crb
                .replace(serde_json::from_value(doc)?)
                .map_or(Ok(()), |_| Err(dup()))?,
            other => bail!("provider-rbac.yaml: unexpected kind {other:?}"),
        }
    }
    Ok(ProviderRbac {
        namespace: ns.context("provider-rbac.yaml has no Namespace")?,
        service_account: sa.context("provider-rbac.yaml has no ServiceAccount")?,
        role: role.context("provider-rbac.yaml has no Role")?,
        binding: rb.context("provider-rbac.yaml has no RoleBinding")?,
        cluster_role: cr,
        cluster_binding: crb,
    })
}

/// Applies the shipped file to `namespace` (created here), binding `subjects`
/// instead of the file's ServiceAccount.
pub async fn apply_provider_rbac(client: &Client, namespace: &str, subjects: Vec<Subject>) -> Result<()> {
    let mut f = provider_rbac()?;
    let ns = Some(namespace.to_string());
    f.namespace.metadata.name = ns.clone();
    f.service_account.metadata.namespace = ns.clone();
    f.role.metadata.namespace = ns.clone();
    f.binding.metadata.namespace = ns.clone();
    f.binding.subjects = Some(subjects.clone());
    let pp = PostParams::default();
    Api::<Namespace>::all(client.clone())
        .create(&pp, &f.namespace)
        .await?;
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create(&pp, &f.service_account)
        .await?;
    Api::<Role>::namespaced(client.clone(), namespace)
        .create(&pp, &f.role)
        .await?;
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(&pp, &f.binding)
        .await?;
    if let (Some(role), Some(mut binding)) = (f.cluster_role, f.cluster_binding) {
        binding.subjects = Some(subjects);
        Api::<ClusterRole>::all(client.clone()).create(&pp, &role).await?;
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&pp, &binding)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_parses_into_its_objects() {
        let f = provider_rbac().unwrap();
        assert_eq!(f.namespace.metadata.name.as_deref(), Some("buzz-agents"));
        let rules = f.role.rules.unwrap();
        let verbs = |res: &str| {
            rules
                .iter()
                .find(|r| r.resources.as_ref().is_some_and(|v| v.iter().any(|x| x == res)))
                .map(|r| r.verbs.clone())
                .unwrap_or_default()
        };
        assert_eq!(
            verbs("pods"),
            ["get", "list", "watch", "create", "delete", "patch"]
        );
        assert_eq!(verbs("secrets"), ["get", "list", "create", "delete", "patch"]);
        assert_eq!(verbs("events"), ["list", "watch"]);
        assert_eq!(
            verbs("persistentvolumeclaims"),
            ["get", "list", "create", "delete"]
        );
        assert_eq!(f.binding.role_ref.name, "buzz-provider");
        let classes = f.cluster_role.unwrap().rules.unwrap();
        assert_eq!(
            classes.len(),
            1,
            "the cluster-scoped role reads StorageClasses only"
        );
        assert_eq!(classes[0].verbs, ["get"]);
        assert_eq!(
            classes[0].resources.as_deref(),
            Some(&["storageclasses".to_string()][..])
        );
        assert_eq!(
            f.cluster_binding.unwrap().role_ref.name,
            "buzz-provider-storageclasses"
        );
        let s = &f.binding.subjects.unwrap()[0];
        assert_eq!(
            (s.kind.as_str(), s.name.as_str()),
            ("ServiceAccount", "buzz-provider")
        );
    }

    #[test]
    fn the_subset_reader_refuses_what_it_does_not_understand() {
        assert!(parse_documents("a: &x 1").is_err());
        assert!(parse_documents("a:\n\tb: 1").is_err());
        assert!(parse_documents("a: {b: 1}").is_err());
        assert!(parse_documents("a: 1\na: 2").is_err());
        let v = parse_documents("a:\n- x\n- 'y # z' # c\nb: [1, c]\n---\nk: v").unwrap();
        assert_eq!(v[0], serde_json::json!({"a": ["x", "y # z"], "b": [1, "c"]}));
        assert_eq!(v[1], serde_json::json!({"k": "v"}));
    }
}
