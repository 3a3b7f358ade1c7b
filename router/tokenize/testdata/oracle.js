// The encoding and chat-template oracle of router/tokenize's tests (installed by
// `make tokenizer-oracle`): @lenml/tokenizers (transformers.js's tokenizers) encodes as the
// Hugging Face tokenizer does; @huggingface/jinja renders chat templates as transformers'
// apply_chat_template does (the copy of Jinja inside @lenml/tokenizers cannot parse Qwen3's).
//
// usage: node oracle.js ORACLE_DIR < request.json > answer.json
// request: {"models": {name: dir}, "encode": [[name, text, addSpecial]…],
//           "chat": [{"model": name, "template"?: src, "messages": […], "tools"?: […],
//                     "add_generation_prompt": bool, "kwargs"?: {…}}…]}
//           "nfc": [text…]}
// answer:  {"encode": [[ids…]…], "chat": [{"text": s} | {"error": s}…], "nfc": [text…]}
"use strict";
const fs = require("fs");
const path = require("path");

const oracleDir = process.argv[2];
const mod = (name) => require(path.join(oracleDir, "node_modules", name));
const { TokenizerLoader } = mod("@lenml/tokenizers");
const { Template } = mod("@huggingface/jinja");

const req = JSON.parse(fs.readFileSync(0, "utf8"));
const models = {};
for (const [name, dir] of Object.entries(req.models || {})) {
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  models[name] = { tok: TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig }), config: tokenizerConfig };
}

const tokenString = (v) => (v && typeof v === "object" ? v.content : v);

// transformers' template variables: its special_tokens_map (the tokens that are set), then
// messages, tools, documents, add_generation_prompt, then the caller's kwargs.
function render(c) {
  const cfg = models[c.model].config;
  const ctx = {};
  for (const k of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
    if (cfg[k] !== undefined && cfg[k] !== null) ctx[k] = tokenString(cfg[k]);
  }
  if (Array.isArray(cfg.additional_special_tokens)) {
    ctx.additional_special_tokens = cfg.additional_special_tokens.map(tokenString);
  }
  Object.assign(ctx, {
    messages: c.messages,
    tools: c.tools === undefined ? null : c.tools,
    documents: null,
    add_generation_prompt: !!c.add_generation_prompt,
  }, c.kwargs || {});
  const src = c.template !== undefined ? c.template : cfg.chat_template;
  return new Template(src).render(ctx);
}

const out = { encode: [], chat: [], nfc: (req.nfc || []).map((s) => s.normalize("NFC")) };
for (const [name, text, addSpecial] of req.encode || []) {
  out.encode.push(Array.from(models[name].tok.encode(text, { add_special_tokens: addSpecial })));
}
for (const c of req.chat || []) {
  try {
    out.chat.push({ text: render(c) });
  } catch (e) {
    out.chat.push({ error: String(e && e.message ? e.message : e) });
  }
}
process.stdout.write(JSON.stringify(out));
