//! The model client against a scripted server on 127.0.0.1, config resolution with a
//! fake environment, and cassettes. No test talks to any other address.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use reproagent::model::cassette::first_difference;
use reproagent::model::config::{resolve, FileConfig, ModelOverrides};
use reproagent::model::{
    ApiKey, ChatModel, ChatRequest, HttpModel, Message, ModelConfig, ModelError, Price, PriceTable, Recorder, Replayer,
    Role, Sampling, Spend, ToolSpec,
};
use serde_json::json;

use crate::support::scripted_server::{Reply, ScriptedServer};

/// A config for the scripted server: fast backoff so retry tests take milliseconds.
fn config(server: &ScriptedServer) -> ModelConfig {
    let mut c = ModelConfig::new(server.base_url(), "test-model");
    c.backoff_base = Duration::from_millis(5);
    c.max_backoff = Duration::from_secs(2);
    c.timeout = Duration::from_secs(5);
    c.max_retries = 3;
    c.retry_budget = Duration::from_secs(20);
    c
}

fn search_tool() -> ToolSpec {
    ToolSpec::new(
        "search_code",
        "BM25 search over the code graph",
        json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
    )
}

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::system("you reproduce bugs"), Message::user("parse_date fails on leap years")])
}

#[test]
fn tool_calling_round_trip_sends_tools_messages_and_sampling() {
    let server = ScriptedServer::start(vec![
        Reply::tool_call("search_code", json!({"query": "parse_date"})).usage(120, 30),
        Reply::text("found it"),
    ]);
    let mut c = config(&server);
    c.api_key = Some(ApiKey::new("sk-test"));
    c.sampling = Sampling { temperature: Some(0.2), top_p: Some(0.9), seed: Some(7), max_tokens: Some(256) };
    let model = HttpModel::new(c);

    let req = hello().with_tools(vec![search_tool()]);
    let first = model.chat(&req).unwrap();
    assert_eq!(first.message.role, Role::Assistant);
    assert_eq!(first.message.content, None);
    assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(first.message.tool_calls.len(), 1);
    let call = &first.message.tool_calls[0];
    assert_eq!(call.name, "search_code");
    assert_eq!(call.arguments_json().unwrap(), json!({"query": "parse_date"}));
    assert_eq!((first.usage.prompt_tokens, first.usage.completion_tokens, first.usage.attempts), (120, 30, 1));
    assert_eq!(first.model, "test-model");

    // The history goes back with the assistant's call and the tool's answer; this call
    // overrides the seed.
    let mut messages = req.messages.clone();
    messages.push(first.message.clone());
    messages.push(Message::tool(call.id.clone(), "src/dates.py:parse_date"));
    let req2 = ChatRequest::new(messages)
        .with_tools(vec![search_tool()])
        .with_sampling(Sampling { seed: Some(99), ..Sampling::default() });
    let second = model.chat(&req2).unwrap();
    assert_eq!(second.message.content.as_deref(), Some("found it"));
    assert_eq!(second.finish_reason.as_deref(), Some("stop"));
    assert!(second.message.tool_calls.is_empty());

    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    let r = &sent[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    let b = &r.body;
    assert_eq!(b["model"], "test-model");
    assert_eq!(b["temperature"], 0.2);
    assert_eq!(b["top_p"], 0.9);
    assert_eq!(b["seed"], 7);
    assert_eq!(b["max_tokens"], 256);
    assert_eq!(b["stream"], false);
    assert_eq!(
        b["messages"],
        json!([
            {"role": "system", "content": "you reproduce bugs"},
            {"role": "user", "content": "parse_date fails on leap years"},
        ])
    );
    assert_eq!(
        b["tools"],
        json!([{"type": "function", "function": {
            "name": "search_code",
            "description": "BM25 search over the code graph",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        }}])
    );

    let b2 = &sent[1].body;
    assert_eq!(b2["seed"], 99, "the request's seed overrides the configured one");
    assert_eq!(b2["temperature"], 0.2, "unset request values keep the configured ones");
    let m = b2["messages"].as_array().unwrap();
    assert_eq!(m.len(), 4);
    assert_eq!(m[2]["role"], "assistant");
    assert_eq!(m[2]["content"], serde_json::Value::Null);
    assert_eq!(m[2]["tool_calls"][0]["id"], call.id.as_str());
    assert_eq!(m[2]["tool_calls"][0]["type"], "function");
    assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "search_code");
    assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"], call.arguments.as_str());
    assert_eq!(m[3], json!({"role": "tool", "content": "src/dates.py:parse_date", "tool_call_id": call.id}));
}

#[test]
fn no_key_sends_no_authorization_header() {
    let server = ScriptedServer::start(vec![Reply::text("hi")]);
    HttpModel::new(config(&server)).chat(&hello()).unwrap();
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[test]
fn invalid_tool_arguments_are_kept_raw() {
    let server = ScriptedServer::start(vec![Reply::raw_tool_call("grep", "{\"pattern\": \"leap")]);
    let resp = HttpModel::new(config(&server)).chat(&hello()).unwrap();
    let call = &resp.message.tool_calls[0];
    assert_eq!(call.name, "grep");
    assert_eq!(call.arguments, "{\"pattern\": \"leap");
    let err = call.arguments_json().unwrap_err();
    assert!(err.contains("not valid JSON"), "{err}");
}

#[test]
fn tool_arguments_sent_as_an_object_are_accepted() {
    // Some local servers send the arguments object itself instead of a string.
    let body = json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": {"path": "src"}}}]},
        "finish_reason": "tool_calls"}]});
    let server = ScriptedServer::start(vec![Reply::raw(200, &body.to_string())]);
    let resp = HttpModel::new(config(&server)).chat(&hello()).unwrap();
    assert_eq!(resp.message.tool_calls[0].arguments_json().unwrap(), json!({"path": "src"}));
    assert_eq!(resp.usage.prompt_tokens, 0, "no usage block: zero tokens, not an error");
}

#[test]
fn a_429_storm_is_retried_after_retry_after_ms_then_succeeds() {
    let server = ScriptedServer::start(vec![
        Reply::status(429).retry_after_ms(80),
        Reply::status(429).retry_after_ms(80),
        Reply::status(429).retry_after_ms(80),
        Reply::text("finally"),
    ]);
    let t = Instant::now();
    let resp = HttpModel::new(config(&server)).chat(&hello()).unwrap();
    let elapsed = t.elapsed();
    assert_eq!(resp.message.content.as_deref(), Some("finally"));
    assert_eq!(resp.usage.attempts, 4);
    assert_eq!(server.requests().len(), 4);
    // The backoff alone would wait about 5+10+20 ms; the server asked for 3 x 80.
    assert!(elapsed >= Duration::from_millis(240), "waited only {elapsed:?}");
    assert!(resp.usage.latency_ms >= 240);
}

#[test]
fn retry_after_seconds_is_honoured() {
    let server = ScriptedServer::start(vec![Reply::status(429).retry_after(1), Reply::text("ok")]);
    let t = Instant::now();
    HttpModel::new(config(&server)).chat(&hello()).unwrap();
    assert!(t.elapsed() >= Duration::from_secs(1), "waited only {:?}", t.elapsed());
}

#[test]
fn retry_after_is_capped() {
    let server = ScriptedServer::start(vec![Reply::status(429).retry_after(3600), Reply::text("ok")]);
    let mut c = config(&server);
    c.max_backoff = Duration::from_millis(100);
    let t = Instant::now();
    let resp = HttpModel::new(c).chat(&hello()).unwrap();
    assert_eq!(resp.usage.attempts, 2);
    assert!(t.elapsed() < Duration::from_secs(3), "took {:?}", t.elapsed());
}

#[test]
fn a_429_storm_longer_than_the_retries_is_a_clear_error() {
    let server = ScriptedServer::start((0..6).map(|_| Reply::status_msg(429, "Rate limit reached")).collect());
    let mut c = config(&server);
    c.max_retries = 2;
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    match &err {
        ModelError::RateLimited { attempts, message, .. } => {
            assert_eq!(*attempts, 3);
            assert_eq!(message, "Rate limit reached");
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 3);
    assert!(err.to_string().contains("429"), "{err}");
    assert!(err.hint().is_some());
}

#[test]
fn a_429_storm_longer_than_the_time_budget_stops_early() {
    let server = ScriptedServer::start((0..20).map(|_| Reply::status(429).retry_after_ms(200)).collect());
    let mut c = config(&server);
    c.max_retries = 50;
    c.retry_budget = Duration::from_millis(500);
    let t = Instant::now();
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    assert!(matches!(err, ModelError::RateLimited { .. }), "{err:?}");
    assert!(t.elapsed() < Duration::from_millis(1500), "took {:?}", t.elapsed());
    let n = server.requests().len();
    assert!((2..=4).contains(&n), "{n} attempts within a 500 ms budget of 200 ms waits");
}

#[test]
fn server_errors_are_retried() {
    let server = ScriptedServer::start(vec![Reply::status(500), Reply::status(503), Reply::text("ok")]);
    let resp = HttpModel::new(config(&server)).chat(&hello()).unwrap();
    assert_eq!(resp.usage.attempts, 3);
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn persistent_server_errors_end_in_a_server_error() {
    let server = ScriptedServer::start(vec![Reply::status(502), Reply::status(502), Reply::text("never")]);
    let mut c = config(&server);
    c.max_retries = 1;
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    assert!(matches!(err, ModelError::Server { status: 502, attempts: 2, .. }), "{err:?}");
    assert_eq!(server.remaining(), 1);
}

#[test]
fn a_dropped_connection_is_retried() {
    let server = ScriptedServer::start(vec![Reply::drop_connection(), Reply::text("ok")]);
    let resp = HttpModel::new(config(&server)).chat(&hello()).unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("ok"));
    assert_eq!(resp.usage.attempts, 2);
}

#[test]
fn connections_dropped_every_time_end_in_a_connection_error() {
    let server = ScriptedServer::start(vec![Reply::drop_connection(), Reply::drop_connection()]);
    let mut c = config(&server);
    c.max_retries = 1;
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    assert!(matches!(err, ModelError::Connection { attempts: 2, .. }), "{err:?}");
}

#[test]
fn a_call_past_the_timeout_is_cut_and_retried() {
    let server = ScriptedServer::start(vec![Reply::text("slow").delay(Duration::from_secs(3)), Reply::text("fast")]);
    let mut c = config(&server);
    c.timeout = Duration::from_millis(300);
    let t = Instant::now();
    let resp = HttpModel::new(c).chat(&hello()).unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("fast"));
    assert_eq!(resp.usage.attempts, 2);
    assert!(t.elapsed() < Duration::from_secs(2), "the slow reply was waited for: {:?}", t.elapsed());
}

#[test]
fn timeouts_on_every_attempt_end_in_a_timeout_error() {
    let server = ScriptedServer::start(vec![
        Reply::text("slow").delay(Duration::from_secs(2)),
        Reply::text("slow").delay(Duration::from_secs(2)),
    ]);
    let mut c = config(&server);
    c.timeout = Duration::from_millis(200);
    c.max_retries = 1;
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    assert!(matches!(err, ModelError::Timeout { timeout_ms: 200, attempts: 2 }), "{err:?}");
}

#[test]
fn a_wrong_key_is_an_auth_error_without_retry() {
    let server = ScriptedServer::start(vec![Reply::status_msg(401, "Incorrect API key provided"), Reply::text("no")]);
    let mut c = config(&server);
    c.api_key_env = "MY_LLM_KEY".into();
    c.api_key = Some(ApiKey::new("sk-wrong"));
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    assert!(matches!(err, ModelError::Auth { status: 401, .. }), "{err:?}");
    assert!(err.to_string().contains("Incorrect API key provided"), "{err}");
    assert!(!err.to_string().contains("sk-wrong"), "{err}");
    let hint = err.hint().unwrap();
    assert!(hint.contains("MY_LLM_KEY") && hint.contains("refused"), "{hint}");
    assert_eq!(server.requests().len(), 1, "an auth error is not retried");
}

#[test]
fn a_missing_key_is_named_in_the_hint() {
    let server = ScriptedServer::start(vec![Reply::status(401)]);
    let err = HttpModel::new(config(&server)).chat(&hello()).unwrap_err();
    let hint = err.hint().unwrap();
    assert!(hint.contains("no key was sent") && hint.contains("OPENAI_API_KEY"), "{hint}");
}

#[test]
fn an_unknown_model_is_a_not_found_error() {
    let server =
        ScriptedServer::start(vec![Reply::status_msg(404, "The model `nope` does not exist"), Reply::text("x")]);
    let mut c = config(&server);
    c.model = "nope".into();
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    match &err {
        ModelError::NotFound { model, message, .. } => {
            assert_eq!(model, "nope");
            assert!(message.contains("does not exist"));
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(err.hint().unwrap().contains("REPROAGENT_MODEL"));
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_refused_request_is_not_retried() {
    let server = ScriptedServer::start(vec![Reply::status_msg(400, "context length exceeded"), Reply::text("x")]);
    let err = HttpModel::new(config(&server)).chat(&hello()).unwrap_err();
    assert!(
        matches!(err, ModelError::Rejected { status: 400, ref message } if message == "context length exceeded"),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn an_unreachable_endpoint_is_a_clear_error() {
    // A loopback port nobody listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut c = ModelConfig::new(format!("http://127.0.0.1:{port}/v1"), "test-model");
    c.backoff_base = Duration::from_millis(5);
    c.max_retries = 1;
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    match &err {
        ModelError::Unreachable { endpoint, attempts, .. } => {
            assert_eq!(*attempts, 2);
            assert!(endpoint.contains(&format!("127.0.0.1:{port}")));
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(err.hint().unwrap().contains("base URL"));
}

#[test]
fn a_garbage_body_is_a_bad_response_with_an_excerpt() {
    let server =
        ScriptedServer::start(vec![Reply::garbage("<html><body>502 from the proxy</body></html>"), Reply::text("x")]);
    let err = HttpModel::new(config(&server)).chat(&hello()).unwrap_err();
    match &err {
        ModelError::BadResponse { reason, excerpt } => {
            assert_eq!(reason, "not JSON");
            assert!(excerpt.contains("502 from the proxy"), "{excerpt}");
        }
        other => panic!("expected BadResponse, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 1);

    let long = "x".repeat(5000);
    let server = ScriptedServer::start(vec![Reply::garbage(&long)]);
    let err = HttpModel::new(config(&server)).chat(&hello()).unwrap_err();
    assert!(err.to_string().len() < 400, "the excerpt is short: {} chars", err.to_string().len());
}

#[test]
fn json_that_is_not_a_completion_is_a_bad_response() {
    let cases = [
        (json!({"object": "chat.completion"}), "no choices"),
        (json!({"choices": []}), "no choices"),
        (json!({"choices": [{"finish_reason": "stop"}]}), "no message in the first choice"),
        (json!({"error": {"message": "model overloaded"}}), "an error object"),
        (json!([1, 2, 3]), "not a JSON object"),
    ];
    for (body, reason) in cases {
        let server = ScriptedServer::start(vec![Reply::raw(200, &body.to_string())]);
        match HttpModel::new(config(&server)).chat(&hello()) {
            Err(ModelError::BadResponse { reason: r, excerpt }) => {
                assert_eq!(r, reason, "{body}");
                if reason == "an error object" {
                    assert_eq!(excerpt, "model overloaded");
                }
            }
            other => panic!("{body}: expected BadResponse, got {other:?}"),
        }
    }
}

#[test]
fn cost_is_accounted_from_the_price_table() {
    let server = ScriptedServer::start(vec![
        Reply::text("a").usage(1000, 500),
        Reply::text("b").usage(2_000_000, 0),
        Reply::text("c").usage(100, 100).model("gpt-4o-mini-2024-07-18"),
    ]);
    let mut c = config(&server);
    c.prices =
        PriceTable::with_overrides(&BTreeMap::from([("test-model".to_string(), Price { input: 2.0, output: 8.0 })]));
    let model = HttpModel::new(c);
    let mut spend = Spend::default();

    let a = model.chat(&hello()).unwrap();
    let cost = a.usage.cost_usd.unwrap();
    assert!((cost - 0.006).abs() < 1e-12, "1000 in at $2/M + 500 out at $8/M: {cost}");
    spend.add(&a.usage);
    let b = model.chat(&hello()).unwrap();
    assert!((b.usage.cost_usd.unwrap() - 4.0).abs() < 1e-9);
    spend.add(&b.usage);
    // The server reports a dated name: priced by its longest listed prefix, gpt-4o-mini.
    let c3 = model.chat(&hello()).unwrap();
    assert!((c3.usage.cost_usd.unwrap() - (100.0 * 0.15 + 100.0 * 0.60) / 1e6).abs() < 1e-12);
    spend.add(&c3.usage);

    assert_eq!(spend.calls, 3);
    assert_eq!(spend.prompt_tokens, 2_001_100);
    assert_eq!(spend.completion_tokens, 600);
    assert_eq!(spend.unpriced_calls, 0);
    assert!((spend.cost_usd - (4.006 + 0.000075)).abs() < 1e-9, "{}", spend.cost_usd);
    assert_eq!(spend.attempts, 3);
}

#[test]
fn an_unpriced_model_has_no_cost_and_is_counted() {
    let server = ScriptedServer::start(vec![Reply::text("a").usage(10, 10)]);
    let mut c = config(&server);
    c.prices = PriceTable::empty();
    let resp = HttpModel::new(c).chat(&hello()).unwrap();
    assert_eq!(resp.usage.cost_usd, None);
    let mut spend = Spend::default();
    spend.add(&resp.usage);
    assert_eq!((spend.unpriced_calls, spend.cost_usd), (1, 0.0));
}

#[test]
fn price_lookup_prefers_exact_then_longest_dashed_prefix() {
    let t = PriceTable::default();
    assert_eq!(t.lookup("gpt-4o").unwrap().input, 2.50);
    assert_eq!(t.lookup("gpt-4o-2024-08-06").unwrap().input, 2.50);
    assert_eq!(t.lookup("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
    assert!(t.lookup("gpt-4oo").is_none(), "a prefix must end at a dash");
    assert!(t.lookup("qwen2.5-coder:7b").is_none());
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn resolve_with(
    explicit: &ModelOverrides,
    env: &HashMap<String, String>,
    file: &str,
) -> Result<ModelConfig, ModelError> {
    let file = FileConfig::parse(file)?;
    resolve(explicit, &|k| env.get(k).cloned(), &file)
}

#[test]
fn config_precedence_is_flags_then_env_then_file_then_defaults() {
    let file = r#"
        [model]
        base_url = "http://127.0.0.1:9/file/v1/"
        model = "file-model"
        api_key_env = "FILE_KEY"
        temperature = 0.1
        seed = 1
        timeout_secs = 30
        max_tokens = 100

        [prices]
        "file-model" = { input = 1.0, output = 3.0 }

        [sandbox]
        anything = "other modules' tables are not ours to refuse"
    "#;
    let e = env(&[
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/env/v1"),
        ("REPROAGENT_MODEL", "env-model"),
        ("FILE_KEY", "k-file-env"),
        ("OPENAI_API_KEY", "k-default-env"),
    ]);
    let flags = ModelOverrides { model: Some("flag-model".into()), seed: Some(42), ..ModelOverrides::default() };
    let c = resolve_with(&flags, &e, file).unwrap();
    assert_eq!(c.model, "flag-model", "a flag beats the environment");
    assert_eq!(c.base_url, "http://127.0.0.1:9/env/v1", "the environment beats the file");
    assert_eq!(c.api_key_env, "FILE_KEY");
    assert_eq!(c.api_key, Some(ApiKey::new("k-file-env")), "the key comes from the variable the file names");
    assert_eq!(c.sampling, Sampling { temperature: Some(0.1), top_p: None, seed: Some(42), max_tokens: Some(100) });
    assert_eq!(c.timeout, Duration::from_secs(30));
    assert_eq!(c.max_retries, 5, "default");
    assert_eq!(c.prices.lookup("file-model"), Some(Price { input: 1.0, output: 3.0 }));
    assert!(c.prices.lookup("gpt-4o").is_some(), "the defaults stay under the file's prices");

    // Without flags and environment, the file; a trailing slash is trimmed.
    let c = resolve_with(&ModelOverrides::default(), &env(&[]), file).unwrap();
    assert_eq!((c.base_url.as_str(), c.model.as_str()), ("http://127.0.0.1:9/file/v1", "file-model"));
    assert_eq!(c.api_key, None);

    // Without anything, the defaults; an empty variable counts as unset.
    let c = resolve_with(&ModelOverrides::default(), &env(&[("REPROAGENT_MODEL", ""), ("OPENAI_API_KEY", "k0")]), "")
        .unwrap();
    assert_eq!(c.base_url, "https://api.openai.com/v1");
    assert_eq!(c.model, "gpt-4o-mini");
    assert_eq!(c.api_key_env, "OPENAI_API_KEY");
    assert_eq!(c.api_key, Some(ApiKey::new("k0")));
    assert_eq!(c.sampling, Sampling::default());
    assert_eq!(c.endpoint_host(), "api.openai.com");

    // A flag beats the file for the key's variable too.
    let flags = ModelOverrides { api_key_env: Some("OPENAI_API_KEY".into()), ..ModelOverrides::default() };
    let c = resolve_with(&flags, &e, file).unwrap();
    assert_eq!(c.api_key, Some(ApiKey::new("k-default-env")));
}

#[test]
fn config_errors_name_the_setting() {
    let none = ModelOverrides::default();
    let e = env(&[]);
    let err = resolve_with(&none, &e, "[model]\ntemperature = 3.0\n").unwrap_err();
    assert!(err.to_string().contains("temperature"), "{err}");
    let err = resolve_with(&none, &e, "[model]\ntop_p = 0.0\n").unwrap_err();
    assert!(err.to_string().contains("top_p"), "{err}");
    let err = resolve_with(&none, &env(&[("OPENAI_BASE_URL", "ftp://example")]), "").unwrap_err();
    assert!(err.to_string().contains("base_url"), "{err}");
    // A key in the file is refused: keys live in the environment only.
    let err = resolve_with(&none, &e, "[model]\napi_key = \"sk-in-file\"\n").unwrap_err();
    assert!(matches!(err, ModelError::Config(_)) && err.to_string().contains("api_key"), "{err}");
    assert!(!err.to_string().contains("sk-in-file"), "{err}");
    let err = resolve_with(&none, &e, "[model]\nmodle = \"typo\"\n").unwrap_err();
    assert!(err.to_string().contains("modle"), "{err}");
}

#[test]
fn the_key_never_prints() {
    let c = resolve_with(&ModelOverrides::default(), &env(&[("OPENAI_API_KEY", "sk-very-secret")]), "").unwrap();
    assert!(!format!("{c:?}").contains("sk-very-secret"));
    assert!(!format!("{:?}", c.info()).contains("sk-very-secret"));
    assert_eq!(c.api_key.as_ref().map(|k| k.expose()), Some("sk-very-secret"));
}

#[test]
fn resolve_from_process_reads_reproagent_toml_at_the_root() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("reproagent.toml"),
        "[model]\ntemperature = 0.3\nseed = 5\ntimeout_secs = 9\n[prices]\n\"m\" = { input = 1.0, output = 2.0 }\n",
    )
    .unwrap();
    // Only settings the environment cannot give are asserted: the process env is not ours.
    let c = reproagent::model::resolve_from_process(&ModelOverrides::default(), dir.path()).unwrap();
    assert_eq!(c.sampling.temperature, Some(0.3));
    assert_eq!(c.sampling.seed, Some(5));
    assert_eq!(c.timeout, Duration::from_secs(9));
    assert!(c.prices.lookup("m").is_some());
    // No file: defaults, no error.
    let empty = tempfile::tempdir().unwrap();
    let c = reproagent::model::resolve_from_process(&ModelOverrides::default(), empty.path()).unwrap();
    assert_eq!(c.sampling.temperature, None);
}

#[test]
fn describe_names_model_host_and_sampling_without_path_or_credentials() {
    let mut c = ModelConfig::new("http://user:pw@127.0.0.1:8080/v1/", "qwen2.5-coder");
    c.sampling.seed = Some(3);
    let info = HttpModel::new(c).describe();
    assert_eq!(info.model, "qwen2.5-coder");
    assert_eq!(info.endpoint_host, "127.0.0.1:8080");
    assert_eq!(info.sampling.seed, Some(3));
}

/// Two calls where the second carries the first's tool call, as the agent loop does.
fn two_step_run(model: &dyn ChatModel, user: &str) -> Vec<Result<reproagent::model::ChatResponse, String>> {
    let mut messages = vec![Message::system("you reproduce bugs"), Message::user(user)];
    let req = ChatRequest::new(messages.clone()).with_tools(vec![search_tool()]);
    let first = model.chat(&req);
    let mut out = vec![first.as_ref().map(Clone::clone).map_err(|e| e.to_string())];
    if let Ok(first) = first {
        let id = first.message.tool_calls.first().map(|c| c.id.clone()).unwrap_or_default();
        messages.push(first.message.clone());
        messages.push(Message::tool(id, "src/dates.py:12 parse_date"));
        let req = ChatRequest::new(messages).with_tools(vec![search_tool()]);
        out.push(model.chat(&req).map_err(|e| e.to_string()));
    }
    out
}

#[test]
fn record_then_replay_gives_identical_responses_with_the_server_gone() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("run.jsonl");
    let server = ScriptedServer::start(vec![
        Reply::status(429).retry_after_ms(20),
        Reply::tool_call("search_code", json!({"query": "leap year"})).usage(50, 7),
        Reply::text("the bug is in parse_date").usage(80, 9),
    ]);
    let mut c = config(&server);
    c.api_key = Some(ApiKey::new("sk-secret-123"));
    c.sampling.seed = Some(11);
    let recorded_info;
    let recorded = {
        let rec = Recorder::create(&cassette, HttpModel::new(c)).unwrap();
        recorded_info = rec.describe();
        two_step_run(&rec, "parse_date fails on Feb 29")
    };
    assert_eq!(recorded.len(), 2);
    assert!(recorded.iter().all(Result::is_ok), "{recorded:?}");
    drop(server);

    let text = std::fs::read_to_string(&cassette).unwrap();
    assert_eq!(text.lines().count(), 3, "a header and one line per call");
    for secret in ["sk-secret-123", "Bearer", "uthorization"] {
        assert!(!text.contains(secret), "the cassette holds {secret:?}");
    }

    let replayer = Replayer::open(&cassette).unwrap();
    assert_eq!((replayer.len(), replayer.remaining()), (2, 2));
    assert_eq!(replayer.describe(), recorded_info);
    let replayed = two_step_run(&replayer, "parse_date fails on Feb 29");
    assert_eq!(replayed, recorded, "latency and attempts included");
    assert_eq!(replayed[0].as_ref().unwrap().usage.attempts, 2, "the recorded retry is part of the record");
    assert_eq!(replayer.remaining(), 0);

    let err = replayer.chat(&hello()).unwrap_err();
    assert!(matches!(err, ModelError::ReplayExhausted { index: 2, recorded: 2 }), "{err:?}");
}

#[test]
fn a_mismatched_replay_fails_naming_the_call_and_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("run.jsonl");
    let server =
        ScriptedServer::start(vec![Reply::tool_call("search_code", json!({"query": "leap"})), Reply::text("done")]);
    two_step_run(&Recorder::create(&cassette, HttpModel::new(config(&server))).unwrap(), "parse_date fails");

    // The first call matches; the second carries a different user message.
    let replayer = Replayer::open(&cassette).unwrap();
    let mut messages = vec![Message::system("you reproduce bugs"), Message::user("parse_date fails")];
    let first = replayer.chat(&ChatRequest::new(messages.clone()).with_tools(vec![search_tool()])).unwrap();
    messages[1] = Message::user("parse_date fails badly");
    messages.push(first.message.clone());
    messages.push(Message::tool(first.message.tool_calls[0].id.clone(), "src/dates.py:12 parse_date"));
    let err = replayer.chat(&ChatRequest::new(messages).with_tools(vec![search_tool()])).unwrap_err();
    match &err {
        ModelError::ReplayMismatch { index, path, recorded, actual } => {
            assert_eq!(*index, 1);
            assert_eq!(path, "messages[1].content");
            assert_eq!(recorded, "\"parse_date fails\"");
            assert_eq!(actual, "\"parse_date fails badly\"");
        }
        other => panic!("expected ReplayMismatch, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("call 1") && msg.contains("messages[1].content"), "{msg}");
    assert!(err.hint().unwrap().contains("--record"));

    // A changed seed or tool list is a mismatch too.
    let replayer = Replayer::open(&cassette).unwrap();
    let base = ChatRequest::new(vec![Message::system("you reproduce bugs"), Message::user("parse_date fails")]);
    let err = replayer
        .chat(
            &base
                .clone()
                .with_tools(vec![search_tool()])
                .with_sampling(Sampling { seed: Some(1), ..Sampling::default() }),
        )
        .unwrap_err();
    assert!(matches!(&err, ModelError::ReplayMismatch { index: 0, path, .. } if path == "sampling.seed"), "{err:?}");
    let err = replayer.chat(&base).unwrap_err();
    assert!(matches!(&err, ModelError::ReplayMismatch { index: 0, path, .. } if path == "tools"), "{err:?}");
}

#[test]
fn a_failed_call_is_recorded_and_replayed_as_the_same_error() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("run.jsonl");
    let server = ScriptedServer::start(vec![Reply::garbage("not a completion")]);
    let rec = Recorder::create(&cassette, HttpModel::new(config(&server))).unwrap();
    let original = rec.chat(&hello()).unwrap_err().to_string();
    drop(rec);
    let replayed = Replayer::open(&cassette).unwrap().chat(&hello()).unwrap_err();
    assert!(matches!(replayed, ModelError::Recorded(_)));
    assert_eq!(replayed.to_string(), original);
}

#[test]
fn a_broken_cassette_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.jsonl");
    std::fs::write(&p, "").unwrap();
    assert!(matches!(Replayer::open(&p), Err(ModelError::Cassette { .. })));
    std::fs::write(
        &p,
        "{\"cassette\":1,\"model\":{\"model\":\"m\",\"endpoint_host\":\"h\",\"sampling\":{}}}\n{\"index\":0,\"request\":\n",
    )
    .unwrap();
    let err = Replayer::open(&p).err().unwrap();
    assert!(err.to_string().contains("line 2"), "{err}");
    let err = Replayer::open(&dir.path().join("missing.jsonl")).err().unwrap();
    assert!(matches!(err, ModelError::Cassette { .. }), "{err:?}");
}

#[test]
fn first_difference_walks_objects_and_arrays() {
    assert_eq!(first_difference(&json!({"a": [1, 2]}), &json!({"a": [1, 2]})), None);
    let (p, r, a) = first_difference(&json!({"a": [1, {"b": "x"}]}), &json!({"a": [1, {"b": "y"}]})).unwrap();
    assert_eq!((p.as_str(), r.as_str(), a.as_str()), ("a[1].b", "\"x\"", "\"y\""));
    let (p, r, a) = first_difference(&json!({"m": [1]}), &json!({"m": [1, 2]})).unwrap();
    assert_eq!((p.as_str(), r.as_str(), a.as_str()), ("m[1]", "(absent)", "2"));
    let (p, _, _) = first_difference(&json!({"a": 1, "z": 1}), &json!({"a": 1})).unwrap();
    assert_eq!(p, "z");
}

#[test]
fn finish_reason_reported_model_and_body_come_through() {
    let server = ScriptedServer::start(vec![Reply::text("partial").finish_reason("length").model("served-model")]);
    let model = HttpModel::new(config(&server));
    let resp = model.chat(&hello()).unwrap();
    assert_eq!(resp.finish_reason.as_deref(), Some("length"));
    assert_eq!(resp.model, "served-model");
    assert_eq!(model.describe().endpoint_host, server.addr().to_string());
    let raw = &server.requests()[0].raw_body;
    assert_eq!(serde_json::from_str::<serde_json::Value>(raw).unwrap(), model.request_body(&hello()));
}
