//! Token prices and the running spend of a run.
//!
//! Prices are USD per million tokens, per model name. The defaults are list prices of a
//! few common hosted models when this was written; they go stale, so `[prices]` in
//! `reproagent.toml` overrides or extends them:
//!
//! ```toml
//! [prices]
//! "gpt-4o" = { input = 2.5, output = 10.0 }
//! "my-local-model" = { input = 0.0, output = 0.0 }
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Usage;

/// USD per million input (prompt) and output (completion) tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

impl Price {
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        (prompt_tokens as f64 * self.input + completion_tokens as f64 * self.output) / 1_000_000.0
    }
}

/// Prices by model name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    pub prices: BTreeMap<String, Price>,
}

const DEFAULTS: &[(&str, f64, f64)] = &[
    ("gpt-4o", 2.50, 10.00),
    ("gpt-4o-mini", 0.15, 0.60),
    ("gpt-4.1", 2.00, 8.00),
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1-nano", 0.10, 0.40),
    ("o3-mini", 1.10, 4.40),
    ("deepseek-chat", 0.27, 1.10),
    ("deepseek-reasoner", 0.55, 2.19),
];

impl Default for PriceTable {
    fn default() -> PriceTable {
        PriceTable {
            prices: DEFAULTS.iter().map(|&(n, i, o)| (n.to_string(), Price { input: i, output: o })).collect(),
        }
    }
}

impl PriceTable {
    /// An empty table: every call unpriced.
    pub fn empty() -> PriceTable {
        PriceTable { prices: BTreeMap::new() }
    }

    /// The defaults with `overrides` on top.
    pub fn with_overrides(overrides: &BTreeMap<String, Price>) -> PriceTable {
        let mut t = PriceTable::default();
        t.prices.extend(overrides.iter().map(|(k, v)| (k.clone(), *v)));
        t
    }

    /// The price of `model`: its exact name, else the longest name in the table that
    /// prefixes it followed by `-` (so `gpt-4o-2024-08-06` is priced as `gpt-4o`, and
    /// `gpt-4o-mini-2024-07-18` as `gpt-4o-mini`, not `gpt-4o`).
    pub fn lookup(&self, model: &str) -> Option<Price> {
        if let Some(p) = self.prices.get(model) {
            return Some(*p);
        }
        self.prices
            .iter()
            .filter(|(name, _)| {
                model.len() > name.len() && model.starts_with(name.as_str()) && model[name.len()..].starts_with('-')
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| *p)
    }

    /// The cost of one call, `None` when the model has no price.
    pub fn cost(&self, model: &str, prompt_tokens: u64, completion_tokens: u64) -> Option<f64> {
        self.lookup(model).map(|p| p.cost(prompt_tokens, completion_tokens))
    }
}

/// What a run has spent so far; the pipeline adds each call's [`Usage`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// USD over the priced calls.
    pub cost_usd: f64,
    /// Calls whose model has no price: their cost is not in `cost_usd`.
    pub unpriced_calls: u64,
    pub latency_ms: u64,
    pub attempts: u64,
}

impl Spend {
    pub fn add(&mut self, usage: &Usage) {
        self.calls += 1;
        self.prompt_tokens += usage.prompt_tokens;
        self.completion_tokens += usage.completion_tokens;
        match usage.cost_usd {
            Some(c) => self.cost_usd += c,
            None => self.unpriced_calls += 1,
        }
        self.latency_ms += usage.latency_ms;
        self.attempts += u64::from(usage.attempts);
    }

    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}
