#!/usr/bin/env node
// Validates the kustomize tree under deploy/kubernetes (or the directory given):
//
//  1. Every kustomization.yaml: known fields only, and every file or directory it names
//     exists (no remote bases). Every other YAML file must be used by some kustomization.
//  2. Every Kubernetes document: against its kind's schema from `kubernetes-models`,
//     `@kubernetes-models/keda` or `@kubernetes-models/prometheus-operator` (types,
//     required fields, enums, formats), and type-checked by TypeScript against the same
//     packages' interfaces, which rejects unknown (misspelled) fields at any depth. A kind
//     none of them knows is an error. Files used as patches are checked the same way
//     with every field optional.
//  3. Policy (what a platform team asks of a workload): see `policy()` below.
//  4. When `kubectl` is available (or $KUBECTL names it), every overlay is rendered with
//     `kubectl kustomize` and the output goes through 2 and 3 again, plus checks across
//     overlays (separate identities and queues per pool, no clashing names). Without it
//     this step is skipped, and says so.
//
//  5. With --facts=FILE (what the binaries serve, written by tests/tests/deploy.rs from
//     the worker's own constants and metrics registry: {"paths": {"metrics", "liveness",
//     "readiness"}, "metrics": [sample names]}), the manifests are checked against it:
//     the metrics address' port is a container port, the probes reach it on the
//     worker's paths, the PodMonitor scrapes that port and path of the worker's pods,
//     and every tablevault_* series an alert names is one the worker serves. Across
//     overlays: each pool's KEDA accountName is its backup account's, and the nightly
//     backup reads the backup pool's accounts.
//  6. With --invocations=FILE, every command a container runs (argv, and the env its
//     ConfigMaps and `env` give it) is written there as JSON, for the test to parse
//     with the binaries' own argument parsers.
//
// Usage: node validate.mjs [DIR] [--no-render | --require-render] [--facts=FILE] [--invocations=FILE]
// Exit status 0 when everything holds, 1 with a list of errors otherwise, 2 on misuse.

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import YAML from "yaml";

const HERE = path.dirname(fileURLToPath(import.meta.url));

// Packages holding models, tried in order for `<apiVersion>/<kind>`.
const MODEL_PACKAGES = [
  "kubernetes-models",
  "@kubernetes-models/keda",
  "@kubernetes-models/prometheus-operator",
];

// The pools that must stay apart, and the overlay that feeds one of them.
const POOLS = {
  backup: "overlays/backup-pool",
  restore: "overlays/restore-pool",
};
const SCHEDULED_BACKUP = "overlays/scheduled-backup";

// Kustomization (kustomize.config.k8s.io/v1beta1) and Component (v1alpha1) fields.
const KUSTOMIZATION_FIELDS = new Set([
  "apiVersion", "kind", "metadata", "resources", "components", "crds", "configurations",
  "generators", "transformers", "validators", "namespace", "namePrefix", "nameSuffix",
  "labels", "commonAnnotations", "images", "replicas", "patches", "configMapGenerator",
  "secretGenerator", "generatorOptions", "replacements", "openapi", "helmCharts",
  "helmGlobals", "buildMetadata", "sortOptions",
]);
const KUSTOMIZATION_DEPRECATED = {
  commonLabels: "labels",
  patchesStrategicMerge: "patches",
  patchesJson6902: "patches",
  bases: "resources",
  vars: "replacements",
};

// ---------------------------------------------------------------------------------------

const args = process.argv.slice(2);
const flags = new Set(args.filter((a) => a.startsWith("--") && !a.includes("=")));
const options = Object.fromEntries(
  args.filter((a) => a.startsWith("--") && a.includes("=")).map((a) => [a.slice(0, a.indexOf("=")), a.slice(a.indexOf("=") + 1)]),
);
for (const f of flags) {
  if (f !== "--no-render" && f !== "--require-render") usage(`unknown option ${f}`);
}
for (const o of Object.keys(options)) {
  if (o !== "--facts" && o !== "--invocations") usage(`unknown option ${o}`);
}
let FACTS = null;
if (options["--facts"]) {
  try {
    FACTS = JSON.parse(fs.readFileSync(options["--facts"], "utf8"));
  } catch (e) {
    usage(`--facts: ${e.message}`);
  }
}
const positional = args.filter((a) => !a.startsWith("--"));
if (positional.length > 1) usage("one directory at most");
const ROOT = path.resolve(positional[0] ?? path.join(HERE, "../kubernetes"));
if (!fs.existsSync(ROOT) || !fs.statSync(ROOT).isDirectory()) usage(`${ROOT} is not a directory`);

function usage(msg) {
  console.error(`validate.mjs: ${msg}\nusage: node validate.mjs [DIR] [--no-render | --require-render] [--facts=FILE] [--invocations=FILE]`);
  process.exit(2);
}

const errors = [];
const rel = (p) => path.relative(ROOT, p) || ".";
function error(where, msg) {
  errors.push(`${where}: ${msg}`);
}

// A parsed YAML document with where it came from.
// { file, index, obj, label, partial }
function docLabel(file, index, obj) {
  const kind = obj?.kind ?? "?";
  const name = obj?.metadata?.name ?? "?";
  return `${file}#${index + 1} (${kind}/${name})`;
}

function parseYamlDocs(text, where) {
  const docs = [];
  for (const [i, d] of YAML.parseAllDocuments(text).entries()) {
    if (d.errors.length) {
      for (const e of d.errors) error(`${where}#${i + 1}`, `YAML: ${e.message}`);
      continue;
    }
    const obj = d.toJS();
    if (obj === null || obj === undefined) continue;
    docs.push(obj);
  }
  return docs;
}

function walk(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (e.name === "node_modules" || e.name.startsWith(".")) continue;
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else out.push(p);
  }
  return out.sort();
}

// ---------------------------------------------------------------------------------------
// 1. Kustomizations

const files = walk(ROOT);
const yamlFiles = files.filter((f) => /\.ya?ml$/.test(f));
const kustomizationFiles = yamlFiles.filter((f) => path.basename(f) === "kustomization.yaml");
for (const f of yamlFiles.filter((f) => /^kustomization\.yml$|^Kustomization$/.test(path.basename(f)))) {
  error(rel(f), "name kustomizations kustomization.yaml");
}

// How each file is used: "resource" | "patch" | "config" | "env".
const usage_ = new Map();
const kustomizations = new Map(); // dir -> parsed kustomization
function use(file, how, where) {
  const prev = usage_.get(file);
  if (prev && prev !== how) error(where, `${rel(file)} is used both as ${prev} and as ${how}`);
  usage_.set(file, how);
}

for (const kf of kustomizationFiles) {
  const where = rel(kf);
  const [k] = parseYamlDocs(fs.readFileSync(kf, "utf8"), where);
  const dir = path.dirname(kf);
  if (!k || typeof k !== "object") {
    error(where, "empty kustomization");
    continue;
  }
  kustomizations.set(dir, k);
  const okKind =
    (k.apiVersion === "kustomize.config.k8s.io/v1beta1" && k.kind === "Kustomization") ||
    (k.apiVersion === "kustomize.config.k8s.io/v1alpha1" && k.kind === "Component");
  if (!okKind) {
    error(where, `apiVersion/kind must be kustomize.config.k8s.io/v1beta1 Kustomization (or v1alpha1 Component), not ${k.apiVersion} ${k.kind}`);
  }
  for (const key of Object.keys(k)) {
    if (KUSTOMIZATION_DEPRECATED[key]) {
      error(where, `\`${key}\` is deprecated in kustomize v5: use \`${KUSTOMIZATION_DEPRECATED[key]}\``);
    } else if (!KUSTOMIZATION_FIELDS.has(key)) {
      error(where, `unknown field \`${key}\` (known: ${[...KUSTOMIZATION_FIELDS].join(", ")})`);
    }
  }
  const ref = (entry, field) => {
    if (typeof entry !== "string") {
      error(where, `${field}: expected a path, found ${JSON.stringify(entry)}`);
      return null;
    }
    if (/^[a-z]+:\/\//i.test(entry) || /^(github\.com|gitlab\.com)\//.test(entry)) {
      error(where, `${field}: remote reference ${entry} (everything deployed must be in this tree)`);
      return null;
    }
    const p = path.resolve(dir, entry);
    if (!fs.existsSync(p)) {
      error(where, `${field}: ${entry} does not exist`);
      return null;
    }
    return p;
  };
  for (const [field, kindWanted] of [["resources", "Kustomization"], ["components", "Component"]]) {
    for (const entry of k[field] ?? []) {
      const p = ref(entry, field);
      if (!p) continue;
      if (fs.statSync(p).isDirectory()) {
        const sub = path.join(p, "kustomization.yaml");
        if (!fs.existsSync(sub)) {
          error(where, `${field}: ${entry} has no kustomization.yaml`);
        } else if (field === "components") {
          const [c] = parseYamlDocs(fs.readFileSync(sub, "utf8"), rel(sub));
          if (c?.kind !== kindWanted) error(where, `components: ${entry} is a ${c?.kind}, not a Component`);
        }
      } else if (field === "components") {
        error(where, `components: ${entry} must be a directory`);
      } else {
        use(p, "resource", where);
      }
    }
  }
  for (const [i, patch] of (k.patches ?? []).entries()) {
    if (patch?.path !== undefined) {
      const p = ref(patch.path, `patches[${i}].path`);
      if (p) use(p, "patch", where);
    } else if (typeof patch?.patch !== "string") {
      error(where, `patches[${i}]: needs \`path\` or \`patch\``);
    }
  }
  for (const entry of k.configurations ?? []) {
    const p = ref(entry, "configurations");
    if (p) use(p, "config", where);
  }
  for (const gen of ["configMapGenerator", "secretGenerator"]) {
    for (const [i, g] of (k[gen] ?? []).entries()) {
      for (const e of g.envs ?? []) {
        const p = ref(e, `${gen}[${i}].envs`);
        if (p) use(p, "env", where);
      }
      for (const e of g.files ?? []) {
        const p = ref(String(e).replace(/^[^=]*=/, ""), `${gen}[${i}].files`);
        if (p) use(p, "env", where);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// 2. Schemas

const modelCache = new Map();
// The model class and the TypeScript module of apiVersion/kind, or null.
async function model(apiVersion, kind) {
  const key = `${apiVersion}/${kind}`;
  if (modelCache.has(key)) return modelCache.get(key);
  let found = null;
  if (typeof apiVersion === "string" && typeof kind === "string" && /^[A-Z][A-Za-z0-9]*$/.test(kind)) {
    for (const pkg of MODEL_PACKAGES) {
      const spec = `${pkg}/${apiVersion}/${kind}`;
      let mod;
      try {
        mod = await import(spec);
      } catch {
        continue;
      }
      const cls = mod[kind];
      // Only top-level kinds (DeploymentSpec has no apiVersion/kind of its own).
      if (cls && cls.apiVersion === apiVersion && cls.kind === kind) {
        found = { cls, spec, type: `I${kind}` };
        break;
      }
    }
  }
  modelCache.set(key, found);
  return found;
}

// Runs a model's JSON-schema validation; returns messages.
function schemaErrors(m, obj) {
  try {
    new m.cls(obj).validate();
    return [];
  } catch (e) {
    if (Array.isArray(e.errors)) {
      return e.errors.map((x) => `${jsonPointerToPath(x.instancePath)}: ${x.message}${x.params?.allowedValues ? ` (${x.params.allowedValues.join(", ")})` : ""}`);
    }
    return [String(e.message ?? e)];
  }
}

function jsonPointerToPath(ptr) {
  if (!ptr) return "(document)";
  return ptr
    .split("/")
    .slice(1)
    .map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"))
    .reduce((acc, s) => (/^\d+$/.test(s) ? `${acc}[${s}]` : acc ? `${acc}.${s}` : s), "");
}

// Type-checks documents against the models' TypeScript interfaces: the compiler rejects
// unknown fields at every depth of an object literal. One program for all documents.
// Like tsc, it may report one error per object and leave the object's others for the
// next run.
function typeCheck(entries) {
  // entries: [{ label, obj, model, partial }]
  if (entries.length === 0) return;
  const virtual = path.join(HERE, "__manifests__.ts");
  const imports = new Map();
  const lines = [
    "type DeepPartial<T> = T extends (infer U)[] ? DeepPartial<U>[] : T extends object ? { [K in keyof T]?: DeepPartial<T[K]> } : T;",
  ];
  entries.forEach((e, i) => {
    let alias = imports.get(e.model.spec);
    if (!alias) {
      alias = `M${imports.size}`;
      imports.set(e.model.spec, alias);
    }
    const t = `${alias}.${e.model.type}`;
    lines.push(`export const doc${i}: ${e.partial ? `DeepPartial<${t}>` : t} = ${JSON.stringify(e.obj, null, 1)};`);
  });
  const head = [...imports].map(([spec, alias]) => `import type * as ${alias} from ${JSON.stringify(spec)};`);
  const source = [...head, ...lines].join("\n");

  const options = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    types: [],
    lib: ["lib.es2022.d.ts"],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) =>
    path.resolve(name) === virtual ? ts.createSourceFile(name, source, lang, true) : getSourceFile(name, lang, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => path.resolve(name) === virtual || fileExists(name);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => (path.resolve(name) === virtual ? source : readFile(name));

  const program = ts.createProgram([virtual], options, host);
  const sf = program.getSourceFile(virtual);
  const diags = [...program.getSyntacticDiagnostics(sf), ...program.getSemanticDiagnostics(sf)];
  for (const d of diags) {
    const msg = ts.flattenDiagnosticMessageText(d.messageText, " ").replace(/\s+/g, " ");
    const at = d.start !== undefined ? locate(sf, d.start) : null;
    if (!at) {
      error("schema check", msg);
      continue;
    }
    const e = entries[at.doc];
    error(e.label, `${at.path || "(document)"}: ${explain(msg)}`);
  }
}

// Which document and which field a position in the generated file is in.
function locate(sf, pos) {
  let node = findNode(sf, pos);
  const parts = [];
  let doc = null;
  while (node) {
    if (ts.isPropertyAssignment(node)) {
      parts.unshift(node.name.text ?? node.name.getText(sf));
    } else if (ts.isArrayLiteralExpression(node.parent ?? {}) && node.parent) {
      const idx = node.parent.elements.indexOf(node);
      if (idx >= 0) parts.unshift(`[${idx}]`);
    }
    if (ts.isVariableDeclaration(node) && /^doc\d+$/.test(node.name.getText(sf))) {
      doc = Number(node.name.getText(sf).slice(3));
      break;
    }
    node = node.parent;
  }
  if (doc === null) return null;
  return { doc, path: parts.reduce((acc, p) => (p.startsWith("[") ? acc + p : acc ? `${acc}.${p}` : p), "") };
}

function findNode(node, pos) {
  for (const child of node.getChildren()) {
    if (child.getStart() <= pos && pos < child.getEnd()) return findNode(child, pos);
  }
  return node;
}

// Compiler wording, made to read as a manifest error.
function explain(msg) {
  const unknown = msg.match(/Object literal may only specify known properties, and '"?([^'"]+)"?' does not exist in type '([^']+)'/);
  if (unknown) {
    const t = unknown[2].replace(/^DeepPartial<(.*)>$/, "$1").replace(/^I(IoK8sApi|IoK8sApimachinery|ComGithub|ComCoreos)?/, "");
    const within = /^[A-Za-z0-9]+$/.test(t) ? `not in ${t}; ` : "";
    return `unknown field \`${unknown[1]}\` (${within}misspelled or misplaced?)`;
  }
  return msg;
}

// ---------------------------------------------------------------------------------------
// 3. Policy

const WORKLOAD_KINDS = new Set(["Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod"]);
const KEY_PATTERN = /AccountKey=|SharedAccessSignature=|[?&]sig=|AccountName=.*;/i;

function podSpecOf(obj) {
  switch (obj.kind) {
    case "Pod":
      return { meta: obj.metadata, spec: obj.spec };
    case "CronJob":
      return obj.spec?.jobTemplate?.spec?.template
        ? { meta: obj.spec.jobTemplate.spec.template.metadata, spec: obj.spec.jobTemplate.spec.template.spec }
        : null;
    default:
      return obj.spec?.template ? { meta: obj.spec.template.metadata, spec: obj.spec.template.spec } : null;
  }
}

// Policy for one complete document. `rendered`: the document is kustomize output (image
// tags and names are final).
function policy(d, rendered) {
  const { obj, label } = d;
  const bad = (msg) => error(label, msg);
  if (obj.kind === "Secret") {
    const values = { ...(obj.data ?? {}), ...(obj.stringData ?? {}) };
    for (const [k, v] of Object.entries(values)) {
      const text = obj.data?.[k] !== undefined ? Buffer.from(String(v), "base64").toString("utf8") : String(v);
      if (KEY_PATTERN.test(text) || /key|connection|sas/i.test(k)) {
        bad(`Secret key \`${k}\` holds a storage account key, SAS or connection string: use workload identity (TABLEVAULT_AUTH_MODE=login) instead`);
      }
    }
  }
  if (obj.kind === "TriggerAuthentication" || obj.kind === "ClusterTriggerAuthentication") {
    const s = obj.spec ?? {};
    if (s.podIdentity?.provider !== "azure-workload") {
      bad("spec.podIdentity.provider must be azure-workload (KEDA reads the queue with its workload identity)");
    }
    for (const f of ["secretTargetRef", "env", "configMapTargetRef", "azureKeyVault", "hashiCorpVault"]) {
      if (s[f] !== undefined) bad(`spec.${f}: no credentials in TriggerAuthentication, use podIdentity azure-workload`);
    }
  }
  if (obj.kind === "ScaledObject" || obj.kind === "ScaledJob") {
    for (const [i, t] of (obj.spec?.triggers ?? []).entries()) {
      if (t.type !== "azure-queue") continue;
      const m = t.metadata ?? {};
      for (const f of ["connection", "connectionFromEnv"]) {
        if (m[f] !== undefined) bad(`spec.triggers[${i}].metadata.${f}: no connection strings, use accountName with workload identity`);
      }
      if (!m.accountName) bad(`spec.triggers[${i}].metadata.accountName is required (workload identity has no connection string)`);
      if (!m.queueName) bad(`spec.triggers[${i}].metadata.queueName is required`);
      if (!t.authenticationRef?.name) bad(`spec.triggers[${i}].authenticationRef is required (a TriggerAuthentication with podIdentity azure-workload)`);
    }
  }
  if (obj.kind === "ServiceAccount" && !obj.metadata?.annotations?.["azure.workload.identity/client-id"]) {
    bad("metadata.annotations: azure.workload.identity/client-id is required (each workload has its own managed identity)");
  }
  if (!WORKLOAD_KINDS.has(obj.kind)) return;

  const pod = podSpecOf(obj);
  if (!pod?.spec) return bad("no pod template");
  const { meta, spec } = pod;
  const where = obj.kind === "CronJob" ? "spec.jobTemplate.spec.template" : obj.kind === "Pod" ? "" : "spec.template";
  const at = (p) => (where ? `${where}.${p}` : p);
  if (meta?.labels?.["azure.workload.identity/use"] !== "true") {
    bad(`${at("metadata.labels")}: azure.workload.identity/use: "true" is required (pods authenticate with workload identity)`);
  }
  if (!spec.serviceAccountName || spec.serviceAccountName === "default") {
    bad(`${at("spec.serviceAccountName")}: a dedicated ServiceAccount is required`);
  }
  const podSec = spec.securityContext ?? {};
  const all = [
    ...(spec.initContainers ?? []).map((c, i) => [c, `initContainers[${i}]`]),
    ...(spec.containers ?? []).map((c, i) => [c, `containers[${i}]`]),
  ];
  for (const [c, cp] of all) {
    const p = (s) => at(`spec.${cp}.${s}`);
    const sec = c.securityContext ?? {};
    const r = c.resources ?? {};
    if (!r.requests?.cpu) bad(`${p("resources.requests.cpu")} is required`);
    if (!r.requests?.memory) bad(`${p("resources.requests.memory")} is required`);
    if (!r.limits?.memory) bad(`${p("resources.limits.memory")} is required`);
    if (obj.kind === "Deployment" && cp.startsWith("containers")) {
      if (!c.livenessProbe) bad(`${p("livenessProbe")} is required`);
      if (!c.readinessProbe) bad(`${p("readinessProbe")} is required`);
    }
    if ((sec.runAsNonRoot ?? podSec.runAsNonRoot) !== true) bad(`${p("securityContext.runAsNonRoot")} must be true`);
    const uid = sec.runAsUser ?? podSec.runAsUser;
    if (uid === 0) bad(`${p("securityContext.runAsUser")} must not be 0`);
    if (sec.readOnlyRootFilesystem !== true) bad(`${p("securityContext.readOnlyRootFilesystem")} must be true`);
    if (sec.allowPrivilegeEscalation !== false) bad(`${p("securityContext.allowPrivilegeEscalation")} must be false`);
    if (sec.privileged === true) bad(`${p("securityContext.privileged")} must not be true`);
    if (!(sec.capabilities?.drop ?? []).includes("ALL")) bad(`${p("securityContext.capabilities.drop")} must include ALL`);
    if (sec.capabilities?.add?.length) bad(`${p("securityContext.capabilities.add")} must be empty`);
    const seccomp = sec.seccompProfile?.type ?? podSec.seccompProfile?.type;
    if (seccomp !== "RuntimeDefault" && seccomp !== "Localhost") {
      bad(`${p("securityContext.seccompProfile.type")} must be RuntimeDefault (on the pod or the container)`);
    }
    for (const [i, e] of (c.env ?? []).entries()) {
      if (typeof e.value === "string" && KEY_PATTERN.test(e.value)) bad(`${p(`env[${i}]`)} (${e.name}) holds a storage key or SAS`);
      if (e.valueFrom?.secretKeyRef) bad(`${p(`env[${i}]`)} (${e.name}) reads a Secret: workloads authenticate with workload identity, not keys`);
    }
    for (const [i, e] of (c.envFrom ?? []).entries()) {
      if (e.secretRef) bad(`${p(`envFrom[${i}]`)} reads a Secret: workloads authenticate with workload identity, not keys`);
    }
    const image = String(c.image ?? "");
    if (rendered && !/@sha256:|:[^/]+$/.test(image)) bad(`${p("image")} ${image} has no tag or digest (set it with the overlay's images:)`);
    if (/:latest$/.test(image)) bad(`${p("image")} must not use :latest`);
  }
  if (obj.kind === "Deployment") {
    if (obj.spec?.replicas !== undefined) {
      bad("spec.replicas must not be set: KEDA owns the replica count, and re-applying would reset it");
    }
    for (const [c, cp] of all) {
      const argv = [...(c.command ?? []), ...(c.args ?? [])];
      if (!argv.includes("tablevault-worker")) continue;
      let grace = 30;
      argv.forEach((a, i) => {
        if (a === "--shutdown-grace") grace = Number(argv[i + 1]);
        else if (a.startsWith("--shutdown-grace=")) grace = Number(a.split("=")[1]);
      });
      const tgps = spec.terminationGracePeriodSeconds ?? 30;
      if (!(tgps > grace)) {
        bad(`${at("spec.terminationGracePeriodSeconds")} (${tgps}) must exceed the worker's --shutdown-grace (${grace}) so it can hand its tasks back (${cp})`);
      }
      // Each pool has its own queue: --queue, or TABLEVAULT_QUEUE from env or a ConfigMap
      // (checked per overlay below).
      const queueFromEnv = (c.env ?? []).some((e) => e.name === "TABLEVAULT_QUEUE") || (c.envFrom ?? []).length > 0;
      if (!argv.some((a) => a === "--queue" || a.startsWith("--queue=")) && !queueFromEnv) {
        bad(`${at(`spec.${cp}`)}: the worker needs --queue or TABLEVAULT_QUEUE (each pool has its own queue)`);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Loading and checking documents

async function checkDocs(docs) {
  // docs: [{ label, obj, partial }]; schema-validates, type-checks and applies policy.
  const typed = [];
  for (const d of docs) {
    const { obj, label } = d;
    if (!obj || typeof obj !== "object" || Array.isArray(obj)) {
      error(label, "not a Kubernetes object");
      continue;
    }
    if (!obj.apiVersion || !obj.kind) {
      error(label, "apiVersion and kind are required");
      continue;
    }
    if (!d.partial && !obj.metadata?.name) error(label, "metadata.name is required");
    const m = await model(obj.apiVersion, obj.kind);
    if (!m) {
      error(label, `unknown kind ${obj.kind} in ${obj.apiVersion}: no schema for it in ${MODEL_PACKAGES.join(", ")} (misspelled, or a CRD the validator does not know)`);
      continue;
    }
    if (!d.partial) for (const msg of schemaErrors(m, obj)) error(label, msg);
    typed.push({ ...d, model: m });
  }
  typeCheck(typed);
  for (const d of typed) if (!d.partial) policy(d, d.rendered === true);
}

const sourceDocs = [];
for (const f of yamlFiles) {
  if (path.basename(f) === "kustomization.yaml") continue;
  const how = usage_.get(f);
  if (!how) {
    error(rel(f), "not used by any kustomization.yaml (delete it, or list it under resources or patches)");
    continue;
  }
  if (how === "config" || how === "env") continue;
  const docs = parseYamlDocs(fs.readFileSync(f, "utf8"), rel(f));
  docs.forEach((obj, i) => sourceDocs.push({ obj, label: docLabel(rel(f), i, obj), partial: how === "patch", file: f }));
}
for (const f of files.filter((f) => !/\.ya?ml$/.test(f))) {
  if (!usage_.has(f)) error(rel(f), "not used by any kustomization.yaml");
}
await checkDocs(sourceDocs);

// ---------------------------------------------------------------------------------------
// 4. Rendering

// Overlays: kustomizations no other kustomization includes.
const included = new Set();
for (const [dir, k] of kustomizations) {
  for (const e of [...(k.resources ?? []), ...(k.components ?? [])]) {
    if (typeof e === "string") included.add(path.resolve(dir, e));
  }
}
const overlays = [...kustomizations.keys()].filter((d) => !included.has(d) && kustomizations.get(d).kind === "Kustomization");

const kubectl = process.env.KUBECTL || "kubectl";
const noRender = flags.has("--no-render");
let rendered = null;
let renderNote;
if (noRender) {
  renderNote = "SKIPPED rendering overlays (--no-render)";
} else {
  const probe = spawnSync(kubectl, ["version", "--client"], { encoding: "utf8" });
  if (probe.error || probe.status !== 0) {
    renderNote = `SKIPPED rendering overlays: \`${kubectl}\` not found (install kubectl, or set KUBECTL, to also check the kustomize output)`;
    if (flags.has("--require-render")) error("render", `--require-render, but ${renderNote.replace(/^SKIPPED rendering overlays: /, "")}`);
  } else {
    rendered = new Map();
    for (const dir of overlays) {
      const r = spawnSync(kubectl, ["kustomize", dir], { encoding: "utf8", maxBuffer: 64 << 20 });
      if (r.status !== 0) {
        error(`render ${rel(dir)}`, `kubectl kustomize failed: ${(r.stderr || r.error?.message || "").trim()}`);
        continue;
      }
      const objs = parseYamlDocs(r.stdout, `render ${rel(dir)}`);
      rendered.set(rel(dir), objs);
    }
    const docs = [];
    for (const [dir, objs] of rendered) {
      objs.forEach((obj, i) => docs.push({ obj, label: docLabel(`render ${dir}`, i, obj), rendered: true }));
    }
    await checkDocs(docs);
    renderNote = `rendered ${rendered.size} overlay(s) with ${kubectl} kustomize`;
  }
}

// ---------------------------------------------------------------------------------------
// Across overlays: separate pools, consistent queues, no clashing names.

// What an overlay deploys, from its rendering, or, unrendered, from its own files and
// its generated ConfigMap literals.
function overlayView(relDir) {
  if (rendered?.has(relDir)) return rendered.get(relDir);
  const dir = path.join(ROOT, relDir);
  const k = kustomizations.get(dir);
  if (!k) return null;
  const out = sourceDocs.filter((d) => path.dirname(d.file) === dir).map((d) => d.obj);
  for (const g of k.configMapGenerator ?? []) {
    const data = generatorData(dir, g, {});
    out.push({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: g.name }, data });
  }
  return out;
}

function crossChecks() {
  const views = {};
  for (const [pool, dir] of Object.entries(POOLS)) {
    const v = overlayView(dir);
    if (!v) {
      error(dir, `missing: the ${pool} pool's overlay`);
      continue;
    }
    const sa = v.filter((o) => o.kind === "ServiceAccount");
    const clientIds = sa.map((o) => o.metadata?.annotations?.["azure.workload.identity/client-id"]).filter(Boolean);
    const cm = v.filter((o) => o.kind === "ConfigMap" && o.data?.TABLEVAULT_QUEUE);
    const queues = cm.map((o) => o.data.TABLEVAULT_QUEUE);
    const env = Object.assign({}, ...cm.map((o) => o.data));
    if (clientIds.length !== 1) error(dir, `expected one ServiceAccount with azure.workload.identity/client-id, found ${clientIds.length}`);
    if (queues.length !== 1) error(dir, `expected one ConfigMap setting TABLEVAULT_QUEUE, found ${queues.length}`);
    if (rendered?.has(dir)) {
      for (const so of v.filter((o) => o.kind === "ScaledObject")) {
        for (const t of so.spec?.triggers ?? []) {
          if (t.type === "azure-queue" && t.metadata?.queueName !== queues[0]) {
            error(dir, `ScaledObject ${so.metadata.name} scales on queue ${t.metadata?.queueName}, but the workers take tasks from ${queues[0]}`);
          }
        }
      }
      const saNames = new Set(sa.map((o) => o.metadata.name));
      for (const dep of v.filter((o) => o.kind === "Deployment")) {
        const n = dep.spec?.template?.spec?.serviceAccountName;
        if (!saNames.has(n)) error(dir, `Deployment ${dep.metadata.name} runs as ServiceAccount ${n}, which the overlay does not define`);
      }
    }
    views[pool] = { dir, clientId: clientIds[0], queue: queues[0], env, saNames: sa.map((o) => o.metadata?.name) };
  }
  const { backup, restore } = views;
  if (backup && restore) {
    if (backup.clientId && backup.clientId === restore.clientId) {
      error("pools", `the backup and restore pools share the managed identity ${backup.clientId}: each needs its own, with its own roles`);
    }
    if (rendered?.has(backup.dir) && rendered?.has(restore.dir) && backup.saNames.some((n) => restore.saNames.includes(n))) {
      error("pools", "the backup and restore pools share a ServiceAccount");
    }
    if (backup.queue && backup.queue === restore.queue) {
      error("pools", `the backup and restore pools share the queue ${backup.queue}: each pool must see only its own tasks`);
    }
    if (backup.env.TABLEVAULT_TARGET) error(backup.dir, "the backup pool must not have TABLEVAULT_TARGET (it never writes tables)");
    if (restore.env.TABLEVAULT_SOURCE) error(restore.dir, "the restore pool must not have TABLEVAULT_SOURCE (it never reads the source tables)");
  }
  const sched = overlayView(SCHEDULED_BACKUP);
  if (sched && backup?.queue) {
    const q = sched.filter((o) => o.kind === "ConfigMap").map((o) => o.data?.TABLEVAULT_QUEUE).find(Boolean);
    if (q !== backup.queue) {
      error(SCHEDULED_BACKUP, `the nightly backup enqueues on ${q ?? "the default queue"}, but the backup pool takes tasks from ${backup.queue}: nothing would run them`);
    }
    const ids = sched.filter((o) => o.kind === "ServiceAccount").map((o) => o.metadata?.annotations?.["azure.workload.identity/client-id"]);
    for (const id of ids) {
      if (id && (id === backup.clientId || id === restore?.clientId)) {
        error(SCHEDULED_BACKUP, `the coordinator shares the managed identity ${id} with a worker pool`);
      }
    }
  }
  if (rendered) {
    const seen = new Map();
    for (const [dir, objs] of rendered) {
      for (const o of objs) {
        const id = `${o.kind} ${o.metadata?.namespace ?? "(no namespace)"}/${o.metadata?.name}`;
        if (seen.has(id) && seen.get(id) !== dir) error(`render ${dir}`, `${id} is also deployed by ${seen.get(id)}`);
        seen.set(id, dir);
      }
    }
  }
}
crossChecks();

// ---------------------------------------------------------------------------------------
// 5 and 6. Against the binaries: what each overlay runs, with the env it gets.

// Reads KEY=VALUE lines and literals into `data`.
function generatorData(dir, g, data) {
  for (const l of g.literals ?? []) {
    const [key, ...v] = String(l).split("=");
    data[key] = v.join("=");
  }
  for (const e of g.envs ?? []) {
    const p = path.join(dir, e);
    if (!fs.existsSync(p)) continue;
    for (const line of fs.readFileSync(p, "utf8").split("\n")) {
      const t = line.trim();
      if (!t || t.startsWith("#")) continue;
      const [key, ...v] = t.split("=");
      data[key] = v.join("=");
    }
  }
  return data;
}

// An overlay built from its sources without kubectl: the resources of its bases and its
// own, and its ConfigMaps, merged down the chain as kustomize's `behavior: merge` does.
// Patches are not applied (the checks below read what they set where they need it).
function buildUnrendered(dir) {
  const k = kustomizations.get(dir);
  const out = { docs: [], configMaps: new Map() };
  if (!k) return out;
  for (const e of k.resources ?? []) {
    if (typeof e !== "string") continue;
    const p = path.resolve(dir, e);
    if (!fs.existsSync(p)) continue;
    if (fs.statSync(p).isDirectory()) {
      const base = buildUnrendered(p);
      out.docs.push(...base.docs);
      for (const [n, d] of base.configMaps) out.configMaps.set(n, { ...d });
    } else {
      out.docs.push(...sourceDocs.filter((d) => d.file === p && !d.partial).map((d) => d.obj));
    }
  }
  for (const g of k.configMapGenerator ?? []) {
    const start = g.behavior === "merge" ? { ...(out.configMaps.get(g.name) ?? {}) } : {};
    out.configMaps.set(g.name, generatorData(dir, g, start));
  }
  return out;
}

// Each overlay is built once (the checks below look at it several times).
const builds = new Map();
function overlayBuild(relDir) {
  if (!builds.has(relDir)) builds.set(relDir, buildOverlay(relDir));
  return builds.get(relDir);
}

function buildOverlay(relDir) {
  if (rendered?.has(relDir)) {
    const objs = rendered.get(relDir);
    const configMaps = new Map(objs.filter((o) => o.kind === "ConfigMap").map((o) => [o.metadata?.name, o.data ?? {}]));
    return { docs: objs, configMaps };
  }
  return buildUnrendered(path.join(ROOT, relDir));
}

// The value an overlay's inline JSON patches set at a path ending in `suffix`, if any.
function patchedValue(relDir, suffix) {
  const k = kustomizations.get(path.join(ROOT, relDir));
  for (const p of k?.patches ?? []) {
    if (typeof p?.patch !== "string") continue;
    let ops;
    try {
      ops = YAML.parse(p.patch);
    } catch {
      continue;
    }
    for (const op of Array.isArray(ops) ? ops : []) {
      if ((op?.op === "replace" || op?.op === "add") && String(op.path).endsWith(suffix)) return op.value;
    }
  }
  return undefined;
}

// Every container of every workload: where, argv, env (ConfigMaps first, then `env`).
const containers = new Map();
function containersOf(relDir) {
  if (!containers.has(relDir)) containers.set(relDir, listContainers(relDir));
  return containers.get(relDir);
}

function listContainers(relDir) {
  const { docs, configMaps } = overlayBuild(relDir);
  const out = [];
  for (const obj of docs) {
    if (!WORKLOAD_KINDS.has(obj?.kind)) continue;
    const pod = podSpecOf(obj);
    const all = [...(pod?.spec?.initContainers ?? []), ...(pod?.spec?.containers ?? [])];
    for (const c of all) {
      const env = {};
      for (const e of c.envFrom ?? []) {
        Object.assign(env, configMaps.get(e.configMapRef?.name) ?? {});
      }
      for (const e of c.env ?? []) if (typeof e.value === "string") env[e.name] = e.value;
      out.push({
        where: `${relDir} ${obj.kind}/${obj.metadata?.name} container ${c.name}`,
        argv: [...(c.command ?? []), ...(c.args ?? [])].map(String),
        env,
        container: c,
        pod: pod.meta,
        kind: obj.kind,
      });
    }
  }
  return out;
}

// The value of `--flag VALUE` or `--flag=VALUE` in argv.
function flagValue(argv, flag) {
  for (const [i, a] of argv.entries()) {
    if (a === flag) return argv[i + 1];
    if (a.startsWith(`${flag}=`)) return a.slice(flag.length + 1);
  }
  return undefined;
}

// The account name of an account URL (https://<name>.<service>.core.windows.net).
function accountOf(url) {
  const m = /^https?:\/\/([a-z0-9]+)\.(blob|queue|table)\./i.exec(String(url ?? ""));
  return m ? m[1] : null;
}

const overlayDirs = overlays.map((d) => rel(d));
const invocations = overlayDirs.flatMap((d) => containersOf(d));

function factChecks() {
  const paths = FACTS.paths ?? {};
  const served = new Set(FACTS.metrics ?? []);
  // The worker pods: ports, probes, the metrics address.
  const workerPods = [];
  for (const inv of invocations.filter((i) => i.kind === "Deployment" && path.basename(i.argv[0] ?? "") === "tablevault-worker")) {
    const c = inv.container;
    workerPods.push(inv);
    const addr = flagValue(inv.argv, "--metrics-addr") ?? inv.env.TABLEVAULT_METRICS_ADDR;
    const ports = c.ports ?? [];
    if (!addr) {
      error(inv.where, "no metrics address (TABLEVAULT_METRICS_ADDR or --metrics-addr): the probes and the PodMonitor have nothing to reach");
      continue;
    }
    const port = Number(String(addr).split(":").pop());
    const served_ = ports.find((p) => p.containerPort === port);
    if (!served_) {
      error(inv.where, `the worker serves on port ${port} (${addr}), which is no containerPort (${ports.map((p) => p.containerPort).join(", ") || "none"})`);
    }
    for (const [probe, wanted] of [["livenessProbe", paths.liveness], ["readinessProbe", paths.readiness]]) {
      const g = c[probe]?.httpGet;
      if (!g) continue;
      const probePort = typeof g.port === "string" ? ports.find((p) => p.name === g.port)?.containerPort : g.port;
      if (probePort !== port) {
        error(inv.where, `${probe} asks port ${g.port} (${probePort ?? "no such port"}), but the worker serves on ${port}`);
      }
      if (wanted && g.path !== wanted) error(inv.where, `${probe} asks ${g.path}, but the worker serves it on ${wanted}`);
    }
  }
  // The PodMonitor: the worker pods' metrics port and path.
  for (const relDir of overlayDirs) {
    for (const obj of overlayBuild(relDir).docs.filter((o) => o?.kind === "PodMonitor")) {
      const where = `${relDir} PodMonitor/${obj.metadata?.name}`;
      const selector = obj.spec?.selector?.matchLabels ?? {};
      const selected = workerPods.filter((w) => Object.entries(selector).every(([k, v]) => w.pod?.labels?.[k] === v));
      if (workerPods.length && !selected.length) error(where, `selects no worker pod (${JSON.stringify(selector)})`);
      for (const [i, ep] of (obj.spec?.podMetricsEndpoints ?? []).entries()) {
        if (paths.metrics && (ep.path ?? "/metrics") !== paths.metrics) {
          error(where, `podMetricsEndpoints[${i}].path ${ep.path}: the worker serves metrics on ${paths.metrics}`);
        }
        for (const w of selected) {
          if (ep.port && !(w.container.ports ?? []).some((p) => p.name === ep.port)) {
            error(where, `podMetricsEndpoints[${i}].port ${ep.port} is no port of ${w.where}`);
          }
        }
      }
    }
    // Alerts: every tablevault_* series is one the worker serves.
    for (const obj of overlayBuild(relDir).docs.filter((o) => o?.kind === "PrometheusRule")) {
      for (const g of obj.spec?.groups ?? []) {
        for (const r of g.rules ?? []) {
          for (const name of String(r.expr ?? "").match(/\btablevault_[a-z0-9_]+/g) ?? []) {
            if (!served.has(name)) {
              error(`${relDir} PrometheusRule/${obj.metadata?.name}`, `${r.alert ?? r.record}: ${name} is no series the worker serves`);
            }
          }
        }
      }
    }
  }
}

// Accounts that must agree across overlays (need no facts).
function accountChecks() {
  const poolEnv = (relDir) => {
    const w = containersOf(relDir).find((i) => path.basename(i.argv[0] ?? "") === "tablevault-worker");
    return w?.env ?? {};
  };
  for (const relDir of Object.values(POOLS)) {
    if (!kustomizations.has(path.join(ROOT, relDir))) continue;
    const env = poolEnv(relDir);
    const backupAccount = accountOf(env.TABLEVAULT_BACKUP);
    let keda = [];
    if (rendered?.has(relDir)) {
      keda = rendered.get(relDir).filter((o) => o.kind === "ScaledObject").flatMap((o) => (o.spec?.triggers ?? []).map((t) => t.metadata?.accountName));
    } else {
      const patched = patchedValue(relDir, "/metadata/accountName");
      keda = patched !== undefined ? [patched] : [];
    }
    for (const name of keda) {
      if (backupAccount && name !== backupAccount) {
        error(relDir, `KEDA watches the queue in account ${name}, but the workers' queue is in ${backupAccount} (TABLEVAULT_BACKUP): the pool would never scale up`);
      }
    }
  }
  const sched = kustomizations.has(path.join(ROOT, SCHEDULED_BACKUP)) ? containersOf(SCHEDULED_BACKUP) : [];
  const backupPool = kustomizations.has(path.join(ROOT, POOLS.backup)) ? poolEnv(POOLS.backup) : {};
  for (const inv of sched) {
    for (const key of ["TABLEVAULT_BACKUP", "TABLEVAULT_SOURCE"]) {
      if (inv.env[key] && backupPool[key] && inv.env[key] !== backupPool[key]) {
        error(inv.where, `${key} is ${inv.env[key]}, but the backup pool's is ${backupPool[key]}: its tasks would name accounts the pool does not serve`);
      }
    }
  }
}

accountChecks();
let factsNote = "not checked against the binaries (no --facts)";
if (FACTS) {
  factChecks();
  factsNote = `checked against the binaries' facts (${(FACTS.metrics ?? []).length} series)`;
}
if (options["--invocations"]) {
  const out = invocations.map(({ where, argv, env }) => ({ where, argv, env }));
  fs.writeFileSync(options["--invocations"], JSON.stringify(out, null, 1));
}

// ---------------------------------------------------------------------------------------

const checked = `${kustomizations.size} kustomization(s), ${sourceDocs.length} source document(s), ${overlays.length} overlay(s)`;
console.log(renderNote);
console.log(`probes, ports, metrics and alerts ${factsNote}`);
if (errors.length) {
  for (const e of errors) console.log(`ERROR ${e}`);
  console.log(`deploy validation FAILED in ${rel(ROOT) === "." ? ROOT : ROOT}: ${errors.length} error(s) (${checked})`);
  process.exit(1);
}
console.log(`deploy validation OK: ${ROOT} (${checked})`);
