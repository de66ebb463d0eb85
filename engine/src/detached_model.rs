//! The Pi model a detached run's bridge uses: where it comes from (the workflow, the run's
//! input, the host's settings, Pi's own default). A pure choice that `run.detach` checks
//! before it detaches a run and the bridges ([`crate::bridges`]) launch with.

use crate::state::bridges::{BridgeSettings, ModelSource, PiModel};

/// The key of a run's input that names its Pi model: `{"piw_detached": {"provider", "model",
/// "pi_args"}}`.
pub const INPUT_KEY: &str = "piw_detached";

/// The Pi model of a detached run: each of provider, model and extra arguments from the first
/// place that sets it, the workflow (`definition`'s `detached`), the run's `input`
/// ([`INPUT_KEY`]), the host's settings; when none of them names both a provider and a model,
/// Pi's own default ([`BridgeSettings::pi_default`](crate::state::bridges::BridgeSettings::pi_default)). `None` when Pi has none either.
pub fn pi_model(
    definition: Option<&serde_json::Value>,
    input: &serde_json::Value,
    settings: &BridgeSettings,
) -> Option<PiModel> {
    let workflow = definition.and_then(|d| d.get("detached"));
    let from_input = input.get(INPUT_KEY);
    let text = |key: &str| {
        [workflow, from_input]
            .into_iter()
            .flatten()
            .find_map(|v| v.get(key).and_then(|v| v.as_str()).map(str::to_owned))
    };
    let pi_args = [workflow, from_input]
        .into_iter()
        .flatten()
        .find_map(|v| {
            v.get("pi_args").and_then(|a| a.as_array()).map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect::<Vec<_>>()
            })
        })
        .unwrap_or_else(|| settings.pi_args.clone());
    let named = text("provider")
        .or_else(|| settings.provider.clone())
        .zip(text("model").or_else(|| settings.model.clone()));
    match (named, &settings.pi_default) {
        (Some((provider, model)), _) => Some(PiModel {
            provider,
            model,
            pi_args,
            source: ModelSource::Named,
        }),
        (None, Some(default)) => Some(PiModel {
            provider: default.provider.clone(),
            model: default.model.clone(),
            pi_args,
            source: ModelSource::PiSettings,
        }),
        (None, None) => None,
    }
}
