//! Applying the record's model and permission mode to a new session
//! (wire-facts §6; issue "real coding agents"). Pure: the raw `session/new`
//! result and the wanted values in, the requests to send out.
//!
//! Real agents read neither `_meta.model` nor an env var for the model; each
//! advertises what it accepts in the `session/new` result:
//!
//! | advertised in `session/new`          | model request                         |
//! |--------------------------------------|---------------------------------------|
//! | `models.availableModels`             | `session/set_model {modelId}`         |
//! | a `model` config option (`select`)   | `session/set_config_option {configId, value}` |
//! | neither                              | none: `_meta.model` only, logged once |
//!
//! | advertised in `session/new`          | mode request                          |
//! |--------------------------------------|---------------------------------------|
//! | `modes.availableModes`               | `session/set_mode {modeId}`           |
//! | a `mode` config option (`select`)    | `session/set_config_option {configId, value}` |
//! | neither                              | none, logged once                     |
//!
//! A wanted value is matched to an advertised id first, then to an
//! advertised display name (case-insensitive). A value the agent advertises
//! a list for but that is not in it is an [`SetupError`]: the asker gets an
//! error reply naming what the agent offers, never a silently ignored choice.
//! The `session/new` result is read untyped because ACP v1's schema has no
//! `models` field; only the fields above are read.

use serde::Deserialize;
use serde_json::Value;

/// One advertised choice: its id and display name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub id: String,
    pub name: String,
}

/// A list of choices and the request that selects one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// `session/set_model` or `session/set_mode`.
    Method(Vec<Choice>),
    /// `session/set_config_option` with this config id.
    ConfigOption { config_id: String, choices: Vec<Choice> },
}

impl Offer {
    fn choices(&self) -> &[Choice] {
        match self {
            Offer::Method(c) | Offer::ConfigOption { choices: c, .. } => c,
        }
    }
}

/// What a `session/new` result offers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Offered {
    pub session_id: String,
    pub model: Option<Offer>,
    pub mode: Option<Offer>,
}

/// One request to send after `session/new`, before the first prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    SetModel { model_id: String },
    SetMode { mode_id: String },
    SetConfigOption { config_id: String, value: String },
}

impl Step {
    /// The ACP method and its params for `session_id`.
    pub fn request(&self, session_id: &str) -> (&'static str, Value) {
        match self {
            Step::SetModel { model_id } => (
                "session/set_model",
                serde_json::json!({ "sessionId": session_id, "modelId": model_id }),
            ),
            Step::SetMode { mode_id } => (
                "session/set_mode",
                serde_json::json!({ "sessionId": session_id, "modeId": mode_id }),
            ),
            Step::SetConfigOption { config_id, value } => (
                "session/set_config_option",
                serde_json::json!({ "sessionId": session_id, "configId": config_id, "value": value }),
            ),
        }
    }
}

/// What could not be applied silently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    #[error("the agent has no model `{wanted}`; it offers: {offered}")]
    UnknownModel { wanted: String, offered: String },
    #[error("the agent has no permission mode `{wanted}`; it offers: {offered}")]
    UnknownMode { wanted: String, offered: String },
    #[error("the agent's session/new result has no sessionId")]
    NoSession,
}

/// Which wanted value the agent gave no way to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unapplied {
    Model,
    Mode,
}

/// The steps, in order (model first, then mode), and what stays unapplied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub unapplied: Vec<Unapplied>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawChoice {
    #[serde(alias = "modelId", alias = "value")]
    id: String,
    #[serde(default)]
    name: Option<String>,
}

fn choices(v: Option<&Value>) -> Vec<Choice> {
    let Some(Value::Array(items)) = v else {
        return Vec::new();
    };
    items
        .iter()
        .flat_map(|item| match item.get("options") {
            // A group of a grouped select: its options.
            Some(Value::Array(inner)) => inner.clone(),
            _ => vec![item.clone()],
        })
        .filter_map(|i| serde_json::from_value::<RawChoice>(i).ok())
        .map(|c| Choice {
            name: c.name.unwrap_or_else(|| c.id.clone()),
            id: c.id,
        })
        .collect()
}

fn config_offer(options: Option<&Value>, which: &str) -> Option<Offer> {
    let Some(Value::Array(opts)) = options else {
        return None;
    };
    opts.iter()
        .find(|o| {
            o.get("type").and_then(Value::as_str) == Some("select")
                && (o.get("id").and_then(Value::as_str) == Some(which)
                    || o.get("category").and_then(Value::as_str) == Some(which))
        })
        .and_then(|o| {
            let config_id = o.get("id")?.as_str()?.to_string();
            Some(Offer::ConfigOption {
                config_id,
                choices: choices(o.get("options")),
            })
        })
}

impl Offered {
    /// Reads a raw `session/new` result.
    pub fn from_result(v: &Value) -> Result<Offered, SetupError> {
        let session_id = v
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(SetupError::NoSession)?
            .to_string();
        let options = v.get("configOptions");
        let model = v
            .get("models")
            .and_then(|m| m.get("availableModels"))
            .filter(|a| a.is_array())
            .map(|a| Offer::Method(choices(Some(a))))
            .or_else(|| config_offer(options, "model"));
        let mode = v
            .get("modes")
            .and_then(|m| m.get("availableModes"))
            .filter(|a| a.is_array())
            .map(|a| Offer::Method(choices(Some(a))))
            .or_else(|| config_offer(options, "mode"));
        Ok(Offered {
            session_id,
            model,
            mode,
        })
    }
}

fn find<'a>(offer: &'a Offer, wanted: &str) -> Option<&'a Choice> {
    let c = offer.choices();
    c.iter()
        .find(|c| c.id == wanted)
        .or_else(|| c.iter().find(|c| c.name.eq_ignore_ascii_case(wanted)))
}

fn offer_list(offer: &Offer) -> String {
    let ids: Vec<&str> = offer.choices().iter().map(|c| c.id.as_str()).collect();
    if ids.is_empty() {
        "nothing".into()
    } else {
        ids.join(", ")
    }
}

impl Unapplied {
    fn unknown(self, wanted: &str, offer: &Offer) -> SetupError {
        let (wanted, offered) = (wanted.to_string(), offer_list(offer));
        match self {
            Unapplied::Model => SetupError::UnknownModel { wanted, offered },
            Unapplied::Mode => SetupError::UnknownMode { wanted, offered },
        }
    }

    /// The dedicated method's step (`session/set_model`, `session/set_mode`).
    fn method_step(self, id: String) -> Step {
        match self {
            Unapplied::Model => Step::SetModel { model_id: id },
            Unapplied::Mode => Step::SetMode { mode_id: id },
        }
    }
}

/// Adds the step applying `wanted` through `offer` (one row of the tables
/// in the module doc), or notes that nothing could apply it.
fn apply(
    plan: &mut Plan,
    what: Unapplied,
    offer: Option<&Offer>,
    wanted: Option<&str>,
) -> Result<(), SetupError> {
    let Some(wanted) = wanted else {
        return Ok(());
    };
    let Some(offer) = offer else {
        plan.unapplied.push(what);
        return Ok(());
    };
    let id = find(offer, wanted)
        .ok_or_else(|| what.unknown(wanted, offer))?
        .id
        .clone();
    plan.steps.push(match offer {
        Offer::Method(_) => what.method_step(id),
        Offer::ConfigOption { config_id, .. } => Step::SetConfigOption {
            config_id: config_id.clone(),
            value: id,
        },
    });
    Ok(())
}

/// The steps that apply `model` and `mode` to what the session offers.
pub fn plan(offered: &Offered, model: Option<&str>, mode: Option<&str>) -> Result<Plan, SetupError> {
    let mut plan = Plan::default();
    apply(&mut plan, Unapplied::Model, offered.model.as_ref(), model)?;
    apply(&mut plan, Unapplied::Mode, offered.mode.as_ref(), mode)?;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The shape claude-agent-acp 0.23.1 returns (real-agents.md §1).
    fn claude() -> Value {
        json!({
            "sessionId": "s1",
            "models": {"currentModelId": "default", "availableModels": [
                {"modelId": "default", "name": "Default (recommended)"},
                {"modelId": "sonnet[1m]", "name": "Sonnet (1M context)"},
                {"modelId": "haiku", "name": "Haiku"}]},
            "modes": {"currentModeId": "default", "availableModes": [
                {"id": "default", "name": "Default"}, {"id": "acceptEdits", "name": "Accept Edits"},
                {"id": "plan", "name": "Plan Mode"}, {"id": "dontAsk", "name": "Don't Ask"}]},
            "configOptions": [
                {"id": "mode", "name": "Mode", "type": "select", "currentValue": "default", "options": [{"value": "default", "name": "Default"}]},
                {"id": "model", "name": "Model", "type": "select", "currentValue": "default", "options": [{"value": "haiku", "name": "Haiku"}]}]
        })
    }

    /// The shape codex-acp 0.16.0 returns: no `models`, a `model` config option (real-agents.md §2).
    fn codex() -> Value {
        json!({
            "sessionId": "c1",
            "modes": {"currentModeId": "read-only", "availableModes": [
                {"id": "read-only", "name": "Read Only"}, {"id": "auto", "name": "Default"}, {"id": "full-access", "name": "Full Access"}]},
            "configOptions": [
                {"id": "mode", "name": "Approval Preset", "category": "mode", "type": "select", "currentValue": "read-only", "options": [{"value": "read-only", "name": "Read Only"}]},
                {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "gpt-5.3-codex", "options": [
                    {"value": "gpt-5.4", "name": "gpt-5.4"}, {"value": "gpt-5.3-codex", "name": "gpt-5.3-codex"}]},
                {"id": "reasoning_effort", "name": "Reasoning Effort", "type": "select", "currentValue": "medium", "options": []}]
        })
    }

    #[test]
    fn models_list_is_applied_with_set_model() {
        let o = Offered::from_result(&claude()).unwrap();
        let p = plan(&o, Some("haiku"), Some("acceptEdits")).unwrap();
        assert_eq!(
            p.steps,
            vec![
                Step::SetModel {
                    model_id: "haiku".into()
                },
                Step::SetMode {
                    mode_id: "acceptEdits".into()
                }
            ]
        );
        assert!(p.unapplied.is_empty());
        // A display name matches too, case-insensitively.
        let p = plan(&o, Some("sonnet (1m context)"), None).unwrap();
        assert_eq!(
            p.steps,
            vec![Step::SetModel {
                model_id: "sonnet[1m]".into()
            }]
        );
    }

    #[test]
    fn a_model_config_option_is_applied_with_set_config_option() {
        let o = Offered::from_result(&codex()).unwrap();
        let p = plan(&o, Some("gpt-5.4"), Some("full-access")).unwrap();
        assert_eq!(
            p.steps,
            vec![
                Step::SetConfigOption {
                    config_id: "model".into(),
                    value: "gpt-5.4".into()
                },
                Step::SetMode {
                    mode_id: "full-access".into()
                }
            ]
        );
        assert_eq!(
            p.steps[0].request("c1"),
            (
                "session/set_config_option",
                json!({"sessionId": "c1", "configId": "model", "value": "gpt-5.4"})
            )
        );
    }

    #[test]
    fn nothing_advertised_keeps_meta_and_says_so() {
        let o = Offered::from_result(&json!({"sessionId": "e"})).unwrap();
        let p = plan(&o, Some("m"), Some("yolo")).unwrap();
        assert!(p.steps.is_empty());
        assert_eq!(p.unapplied, vec![Unapplied::Model, Unapplied::Mode]);
        assert_eq!(plan(&o, None, None).unwrap(), Plan::default());
    }

    #[test]
    fn an_unknown_model_or_mode_is_an_error_naming_the_offer() {
        let o = Offered::from_result(&claude()).unwrap();
        let e = plan(&o, Some("gpt-9"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the agent has no model `gpt-9`; it offers: default, sonnet[1m], haiku"
        );
        let e = plan(&o, None, Some("bypassPermissions")).unwrap_err();
        assert!(matches!(e, SetupError::UnknownMode { .. }), "{e}");
        let o = Offered::from_result(&codex()).unwrap();
        assert!(matches!(
            plan(&o, Some("haiku"), None),
            Err(SetupError::UnknownModel { .. })
        ));
    }

    #[test]
    fn grouped_options_and_bad_shapes() {
        let v = json!({"sessionId": "g", "configOptions": [
            {"id": "m", "category": "model", "type": "select", "currentValue": "a",
             "options": [{"group": "x", "name": "X", "options": [{"value": "a", "name": "A"}, {"value": "b", "name": "B"}]}]}]});
        let o = Offered::from_result(&v).unwrap();
        assert_eq!(
            plan(&o, Some("b"), None).unwrap().steps,
            vec![Step::SetConfigOption {
                config_id: "m".into(),
                value: "b".into()
            }]
        );
        assert_eq!(Offered::from_result(&json!({})), Err(SetupError::NoSession));
        assert_eq!(
            Offered::from_result(&json!({"sessionId": ""})),
            Err(SetupError::NoSession)
        );
        // `models` that is not a list is no offer.
        let o = Offered::from_result(&json!({"sessionId": "x", "models": {"availableModels": 3}})).unwrap();
        assert_eq!(o.model, None);
    }
}
