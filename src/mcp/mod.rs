//! The MCP server (`reproagent serve`): lists and runs the tools of [`crate::tools`] over
//! stdio, through the `rmcp` crate. Only this module knows JSON-RPC and MCP.
//!
//! A tool error (unknown tool, bad arguments, a refused path, a bad regex, a missing or
//! stale index) is a tool result with `isError: true` and the error's JSON as its
//! content; the server keeps serving. Tools run on the blocking pool, so a slow walk
//! does not stall the transport.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool as McpTool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use thiserror::Error;

use crate::tools::{Registry, ToolContext, ToolOutput};

#[derive(Debug, Error)]
pub enum McpError {
    /// The client never completed `initialize`, or the transport failed.
    #[error("MCP session failed to start: {0}")]
    Start(String),
    #[error("MCP session ended abnormally: {0}")]
    Join(String),
    #[error("tokio runtime: {0}")]
    Runtime(String),
}

/// The server: the tools and the session context they share.
#[derive(Clone)]
pub struct Server {
    registry: Arc<Registry>,
    ctx: Arc<ToolContext>,
    tools: Arc<Vec<McpTool>>,
    instructions: Arc<String>,
}

impl Server {
    pub fn new(registry: Registry, ctx: ToolContext) -> Self {
        let tools = registry
            .tools()
            .map(|t| {
                let schema: JsonObject = match t.schema() {
                    Value::Object(o) => o,
                    _ => JsonObject::new(),
                };
                let mut tool = McpTool::new(t.name(), t.description(), Arc::new(schema));
                // The answer's schema (MCP wants an object schema; every answer is one).
                if let Value::Object(o) = t.output_schema() {
                    if o.get("type").and_then(Value::as_str) == Some("object") {
                        tool.output_schema = Some(Arc::new(o));
                    }
                }
                tool
            })
            .collect();
        let names: Vec<&str> = registry.tools().map(|t| t.name()).collect();
        let instructions = format!(
            "Tools over one indexed repository ({}): {}. Paths are relative to the repository root. \
             Outputs are bounded and say how to get the rest; errors come as results with a hint.",
            ctx.root().display(),
            names.join(", ")
        );
        Server {
            registry: Arc::new(registry),
            ctx: Arc::new(ctx),
            tools: Arc::new(tools),
            instructions: Arc::new(instructions),
        }
    }
}

/// A tool's output as MCP content: compact JSON (pretty-printing was a quarter of all
/// characters), file text (`read_file`, `read_entity`) as a second block of plain text
/// rather than a JSON-escaped string, and the whole value as structured content, which
/// for a successful call conforms to the tool's declared `outputSchema`.
pub(crate) fn to_result(out: ToolOutput) -> CallToolResult {
    let mut meta = out.value.clone();
    let text = match meta.as_object_mut().and_then(|o| o.remove("content")) {
        Some(Value::String(t)) => Some(t),
        Some(other) => {
            if let Some(o) = meta.as_object_mut() {
                o.insert("content".into(), other);
            }
            None
        }
        None => None,
    };
    let json = serde_json::to_string(&meta).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    let mut content = vec![ContentBlock::text(json)];
    if let Some(t) = text {
        content.push(ContentBlock::text(t));
    }
    let mut r = if out.is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    if out.value.is_object() {
        r.structured_content = Some(out.value);
    }
    r
}

/// A line on stderr (never stdout: that is the protocol's) when `RUST_LOG` asks for
/// `info` or more of reproagent: each call's tool, time, size and whether it failed.
fn log_call(name: &str, started: std::time::Instant, out: &ToolOutput, cancelled: bool) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| {
        std::env::var("RUST_LOG").is_ok_and(|v| {
            v.split(',').any(|d| {
                let (target, level) = d.split_once('=').unwrap_or(("", d));
                (target.is_empty() || target.starts_with("reproagent"))
                    && matches!(level.trim(), "info" | "debug" | "trace")
            })
        })
    });
    if on {
        let chars = out.value.to_string().len();
        let status = match (cancelled, out.is_error) {
            (true, _) => "cancelled",
            (false, true) => "error",
            (false, false) => "ok",
        };
        let note = out.value.get("note").and_then(Value::as_str).map(|n| format!(": {n}")).unwrap_or_default();
        eprintln!("reproagent serve: {name} {status} in {} ms, {chars} chars{note}", started.elapsed().as_millis());
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("reproagent", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.instructions.as_str())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        let (registry, ctx) = (self.registry.clone(), self.ctx.clone());
        let started = std::time::Instant::now();
        // The client's `notifications/cancelled` sets the flag the tool's loops look at.
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (set, ct) = (flag.clone(), context.ct.clone());
        let watcher = tokio::spawn(async move {
            ct.cancelled().await;
            set.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let out = tokio::task::spawn_blocking(move || {
            let out = crate::cancel::with_flag(flag.clone(), || registry.call(&ctx, &name, args));
            // Logged here: a cancelled request's handler may be gone by now.
            log_call(&name, started, &out, flag.load(std::sync::atomic::Ordering::Relaxed));
            out
        })
        .await;
        watcher.abort();
        let out = match out {
            Ok(o) => o,
            Err(e) => ToolOutput::error(&crate::tools::ToolError::Other(format!("the tool failed: {e}"))),
        };
        Ok(to_result(out).into())
    }
}

/// A runtime for the server (and for a sandbox the runtime tools drive).
pub fn runtime() -> Result<tokio::runtime::Runtime, McpError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| McpError::Runtime(e.to_string()))
}

/// Serve MCP over this process's stdin and stdout until the client closes them.
pub fn serve_stdio(server: Server) -> Result<(), McpError> {
    serve_stdio_on(&runtime()?, server)
}

/// [`serve_stdio`] on a given runtime.
pub fn serve_stdio_on(rt: &tokio::runtime::Runtime, server: Server) -> Result<(), McpError> {
    rt.block_on(async move {
        let running = server.serve(rmcp::transport::stdio()).await.map_err(|e| McpError::Start(e.to_string()))?;
        running.waiting().await.map_err(|e| McpError::Join(e.to_string()))?;
        Ok(())
    })
}
