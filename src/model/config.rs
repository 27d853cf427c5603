//! Where the model settings come from. Four layers, the first that sets a value wins:
//! 1. explicit values (what the CLI's flags give), 2. the environment (`OPENAI_API_KEY`,
//!    `OPENAI_BASE_URL`, `REPROAGENT_MODEL`), 3. `[model]` in `reproagent.toml` at the
//!    repository root, 4. defaults.
//!
//! [`resolve`] is pure: the environment comes in as a function, so tests drive it with a
//! map. [`resolve_from_process`] is what the CLI calls. The key is read from the
//! environment only (never a flag, never the file) and is kept in an [`ApiKey`], which
//! neither prints nor serializes.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::price::{Price, PriceTable};
use super::{ModelError, ModelInfo, Sampling};

/// The file the settings are read from, at the repository root.
pub const CONFIG_FILE: &str = "reproagent.toml";
/// Where the key is read from unless `api_key_env` names another variable.
pub const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";
pub const ENV_BASE_URL: &str = "OPENAI_BASE_URL";
pub const ENV_MODEL: &str = "REPROAGENT_MODEL";
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// A server that accepts and never answers is given up on within this: one attempt's
/// time, and the whole call's (the retry budget), are a minute by default.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
pub const DEFAULT_MAX_RETRIES: u32 = 5;
pub const DEFAULT_RETRY_BUDGET_SECS: u64 = 60;

/// An API key. Its `Debug` and `Display` print `***`, and it has no `Serialize`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }
    /// The key itself, for the `Authorization` header and nothing else.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// One layer of settings, every value optional. The CLI fills one from its flags; the
/// `[model]` table of `reproagent.toml` is read into another (unknown keys are an error,
/// so a typo or an `api_key` in the file is caught).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelOverrides {
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// The environment variable holding the key (default `OPENAI_API_KEY`).
    pub api_key_env: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    pub timeout_secs: Option<u64>,
    pub max_retries: Option<u32>,
    pub retry_budget_secs: Option<u64>,
    /// The model of `reproduce`'s independent review, on the same endpoint (`--review-model`).
    pub review_model: Option<String>,
}

impl ModelOverrides {
    /// `self`'s values where set, else `lower`'s.
    fn over(&self, lower: &ModelOverrides) -> ModelOverrides {
        ModelOverrides {
            base_url: self.base_url.clone().or_else(|| lower.base_url.clone()),
            model: self.model.clone().or_else(|| lower.model.clone()),
            api_key_env: self.api_key_env.clone().or_else(|| lower.api_key_env.clone()),
            temperature: self.temperature.or(lower.temperature),
            top_p: self.top_p.or(lower.top_p),
            seed: self.seed.or(lower.seed),
            max_tokens: self.max_tokens.or(lower.max_tokens),
            timeout_secs: self.timeout_secs.or(lower.timeout_secs),
            max_retries: self.max_retries.or(lower.max_retries),
            retry_budget_secs: self.retry_budget_secs.or(lower.retry_budget_secs),
            review_model: self.review_model.clone().or_else(|| lower.review_model.clone()),
        }
    }
}

/// The parts of `reproagent.toml` this module reads. Other tables are left to their owners.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct FileConfig {
    #[serde(default)]
    pub model: ModelOverrides,
    /// USD per million tokens by model name, over the defaults.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
}

impl FileConfig {
    pub fn parse(text: &str) -> Result<FileConfig, ModelError> {
        toml::from_str(text).map_err(|e| ModelError::Config(format!("{CONFIG_FILE}: {}", e.message())))
    }

    /// `root/reproagent.toml`, or an empty config when there is none.
    pub fn load(root: &Path) -> Result<FileConfig, ModelError> {
        match crate::confine::read_config(root, CONFIG_FILE) {
            Ok(Some(text)) => FileConfig::parse(&text),
            Ok(None) => Ok(FileConfig::default()),
            Err(why) => Err(ModelError::Config(why)),
        }
    }
}

/// Everything [`super::HttpModel`] needs, resolved and checked.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Without a trailing `/`; `/chat/completions` is appended.
    pub base_url: String,
    pub model: String,
    /// The variable the key was looked up in (named in the hint of an auth error).
    pub api_key_env: String,
    /// `None` for local servers that need no key.
    pub api_key: Option<ApiKey>,
    pub sampling: Sampling,
    /// Per HTTP attempt.
    pub timeout: Duration,
    /// Retries after the first attempt (so `max_retries + 1` attempts at most).
    pub max_retries: u32,
    /// The call ends by this much time after it began: no retry starts past it, and an
    /// attempt's timeout is cut to what is left of it.
    pub retry_budget: Duration,
    /// The first backoff; it doubles per retry, with jitter, up to `max_backoff`.
    pub backoff_base: Duration,
    /// The cap on one wait, a server's `Retry-After` included.
    pub max_backoff: Duration,
    pub prices: PriceTable,
}

impl ModelConfig {
    /// The defaults for an endpoint and model, with no key.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> ModelConfig {
        ModelConfig {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            model: model.into(),
            api_key_env: DEFAULT_KEY_ENV.to_string(),
            api_key: None,
            sampling: Sampling::default(),
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            max_retries: DEFAULT_MAX_RETRIES,
            retry_budget: Duration::from_secs(DEFAULT_RETRY_BUDGET_SECS),
            backoff_base: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            prices: PriceTable::default(),
        }
    }

    /// The host (and port) of the base URL, for run records: no scheme, path or userinfo.
    pub fn endpoint_host(&self) -> String {
        endpoint_host(&self.base_url)
    }

    pub fn info(&self) -> ModelInfo {
        ModelInfo { model: self.model.clone(), endpoint_host: self.endpoint_host(), sampling: self.sampling.clone() }
    }
}

pub(crate) fn endpoint_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    authority.rsplit_once('@').map_or(authority, |(_, h)| h).to_string()
}

/// The environment's layer: base URL and model. (The key is looked up separately, in the
/// variable the resolved `api_key_env` names.) Empty values count as unset.
fn env_layer(env: &dyn Fn(&str) -> Option<String>) -> ModelOverrides {
    let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    ModelOverrides { base_url: get(ENV_BASE_URL), model: get(ENV_MODEL), ..ModelOverrides::default() }
}

/// Resolve the settings: `explicit` over the environment over `file` over the defaults,
/// then check them. Pure: `env` is how a variable is read.
pub fn resolve(
    explicit: &ModelOverrides,
    env: &dyn Fn(&str) -> Option<String>,
    file: &FileConfig,
) -> Result<ModelConfig, ModelError> {
    let o = explicit.over(&env_layer(env)).over(&file.model);

    let base_url = o.base_url.unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
    let base_url = base_url.trim().trim_end_matches('/').to_string();
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) || endpoint_host(&base_url).is_empty() {
        return Err(ModelError::Config(format!("base_url {base_url:?} is not an http:// or https:// URL")));
    }
    let model = o.model.unwrap_or_else(|| DEFAULT_MODEL.to_string()).trim().to_string();
    if model.is_empty() {
        return Err(ModelError::Config("the model name is empty".into()));
    }
    let api_key_env = o.api_key_env.unwrap_or_else(|| DEFAULT_KEY_ENV.to_string());
    let api_key = env(&api_key_env).map(|k| k.trim().to_string()).filter(|k| !k.is_empty()).map(ApiKey);

    if let Some(t) = o.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(ModelError::Config(format!("temperature {t} is outside 0..=2")));
        }
    }
    if let Some(p) = o.top_p {
        if !(p > 0.0 && p <= 1.0) {
            return Err(ModelError::Config(format!("top_p {p} is outside (0, 1]")));
        }
    }
    if o.max_tokens == Some(0) {
        return Err(ModelError::Config("max_tokens must be at least 1".into()));
    }
    let timeout_secs = o.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
    if timeout_secs == 0 {
        return Err(ModelError::Config("timeout_secs must be at least 1".into()));
    }

    let mut c = ModelConfig::new(base_url, model);
    c.api_key_env = api_key_env;
    c.api_key = api_key;
    c.sampling = Sampling { temperature: o.temperature, top_p: o.top_p, seed: o.seed, max_tokens: o.max_tokens };
    c.timeout = Duration::from_secs(timeout_secs);
    c.max_retries = o.max_retries.unwrap_or(DEFAULT_MAX_RETRIES);
    c.retry_budget = Duration::from_secs(o.retry_budget_secs.unwrap_or(DEFAULT_RETRY_BUDGET_SECS));
    c.prices = PriceTable::with_overrides(&file.prices);
    Ok(c)
}

/// [`resolve`] with the process environment and `root/reproagent.toml`: what the CLI calls.
pub fn resolve_from_process(explicit: &ModelOverrides, root: &Path) -> Result<ModelConfig, ModelError> {
    let file = FileConfig::load(root)?;
    resolve(explicit, &|k| std::env::var(k).ok(), &file)
}
