// Validates Kubernetes objects offline against the API types of the
// `kubernetes-models` package (JSON-schema validators generated from the
// Kubernetes OpenAPI spec), and rejects fields the API does not define.
//
// Usage: node validate.mjs FILE.yaml...   ("-" reads standard input)
// Exit status: 0 when every object is valid, 1 when any is not (each problem
// is printed on its own line, naming the object and the field), 2 on a usage
// or setup error (e.g. the packages are not installed).
//
// Why the unknown-field check is needed: the generated validators check the
// types, formats and required fields of every known property, but the
// Kubernetes OpenAPI spec does not close its objects (no additionalProperties:
// false), so a misspelled field ("livenesProbe") would pass silently, while
// the API server drops or rejects it. The validators read every property the
// schema defines (`data.<name>` for each one, every key of a map), so we hand
// them a Proxy that records what they read: any key of an object that the
// schema never looked at is a field the type does not have.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

function die(message) {
  console.error(`validate: ${message}`);
  process.exit(2);
}

// The packages are installed next to this file by
// deploy/tools/setup_validator.sh; refuse to run against anything else.
function checkInstalled() {
  const lock = JSON.parse(readFileSync(path.join(here, "package-lock.json"), "utf8"));
  for (const name of ["kubernetes-models", "yaml"]) {
    const want = lock.packages?.[`node_modules/${name}`]?.version;
    let have;
    try {
      have = JSON.parse(
        readFileSync(path.join(here, "node_modules", name, "package.json"), "utf8"),
      ).version;
    } catch {
      die(`${name} is not installed in ${here}/node_modules: run deploy/tools/setup_validator.sh`);
    }
    if (have !== want) {
      die(`${name} ${have} is installed but package-lock.json pins ${want}: run deploy/tools/setup_validator.sh`);
    }
  }
}

// "apps/v1" + "Deployment" -> the model class, or null if the package has no
// such type.
async function loadModel(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" ||
      !/^[a-z0-9.]*\/?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Za-z0-9]+$/.test(kind)) {
    return null;
  }
  const file = path.join(here, "node_modules", "kubernetes-models", apiVersion, `${kind}.js`);
  let mod;
  try {
    mod = await import(pathToFileURL(file).href);
  } catch (e) {
    if (e.code === "ERR_MODULE_NOT_FOUND") return null;
    throw e;
  }
  const model = mod[kind];
  if (typeof model !== "function" || model.apiVersion !== apiVersion || model.kind !== kind) {
    return null;
  }
  return model;
}

// Wraps `root` so that every property read on it (and on everything
// reached through it) is recorded: seen is Map<object, Set<key>>. One proxy
// per object, so repeated reads see the same one.
function trackAll(root) {
  const seen = new Map();
  const proxies = new Map();
  const wrap = (value) => {
    if (value === null || typeof value !== "object") return value;
    if (proxies.has(value)) return proxies.get(value);
    const keys = new Set();
    seen.set(value, keys);
    const proxy = new Proxy(value, {
      get(target, key, receiver) {
        const child = Reflect.get(target, key, receiver);
        if (typeof key !== "string") return child;
        keys.add(key);
        return Object.prototype.hasOwnProperty.call(target, key) ? wrap(child) : child;
      },
      has(target, key) {
        if (typeof key === "string") keys.add(key);
        return Reflect.has(target, key);
      },
    });
    proxies.set(value, proxy);
    return proxy;
  };
  return { proxy: wrap(root), seen };
}

// Every key of every object the validator entered that it never read.
function unknownFields(value, seen, at, out) {
  if (value === null || typeof value !== "object") return;
  const keys = seen.get(value);
  if (!keys) return; // not entered: its parent key is already reported
  if (Array.isArray(value)) {
    value.forEach((item, i) => unknownFields(item, seen, `${at}/${i}`, out));
    return;
  }
  for (const key of Object.keys(value)) {
    if (!keys.has(key)) {
      out.push(`${at}/${key}: unknown field`);
    } else {
      unknownFields(value[key], seen, `${at}/${key}`, out);
    }
  }
}

// A few of the API server's own validation rules, which the schemas do not
// carry: object, container and port names, and labels. (The server checks far
// more; these are the ones a manifest edit most often breaks.)
const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const IANA_SVC_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function checkLabels(labels, at, out) {
  for (const [key, value] of Object.entries(labels ?? {})) {
    const slash = key.lastIndexOf("/");
    const prefix = slash >= 0 ? key.slice(0, slash) : null;
    const name = key.slice(slash + 1);
    if ((prefix !== null && (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix))) ||
        name.length > 63 || !LABEL_NAME.test(name)) {
      out.push(`${at}/${key}: invalid label key`);
    }
    if (typeof value !== "string" || value.length > 63 || (value !== "" && !LABEL_NAME.test(value))) {
      out.push(`${at}/${key}: invalid label value ${JSON.stringify(value)}`);
    }
  }
}

function checkPodSpec(spec, at, out) {
  if (!spec || typeof spec !== "object") return;
  for (const list of ["initContainers", "containers"]) {
    (spec[list] ?? []).forEach((c, i) => {
      if (typeof c?.name === "string" && (c.name.length > 63 || !DNS1123_LABEL.test(c.name))) {
        out.push(`${at}/${list}/${i}/name: ${JSON.stringify(c.name)} is not a DNS-1123 label`);
      }
      (c?.ports ?? []).forEach((p, j) => {
        if (p?.name !== undefined && (p.name.length > 15 || !IANA_SVC_NAME.test(p.name) ||
                                      !/[a-z]/.test(p.name))) {
          out.push(`${at}/${list}/${i}/ports/${j}/name: ${JSON.stringify(p.name)} is not an IANA service name`);
        }
      });
    });
  }
}

function serverRules(doc) {
  const out = [];
  const name = doc.metadata?.name;
  if (typeof name !== "string" || name === "") {
    out.push("/metadata/name: required");
  } else if (name.length > 253 || !DNS1123_SUBDOMAIN.test(name)) {
    out.push(`/metadata/name: ${JSON.stringify(name)} is not a DNS-1123 subdomain`);
  }
  checkLabels(doc.metadata?.labels, "/metadata/labels", out);
  if (doc.kind === "Pod") checkPodSpec(doc.spec, "/spec", out);
  const template = doc.spec?.template ?? doc.spec?.jobTemplate?.spec?.template;
  if (template) {
    checkLabels(template.metadata?.labels, "/spec/template/metadata/labels", out);
    checkPodSpec(template.spec, "/spec/template/spec", out);
  }
  return out;
}

// cert-manager's CRDs are not Kubernetes API types, so kubernetes-models has
// no validator for them. The examples use two of its kinds, and an explicit
// allowance checks them against the subset of the cert-manager.io/v1 schema
// they use (closed: any other field is reported as unknown). Anything else of
// cert-manager's (ClusterIssuer, ACME or Vault issuers, ...) is rejected like
// any unknown kind until it is added here.
const STRING = { type: "string" };
const STRINGS = { type: "array", items: STRING };
const STRING_MAP = { type: "map", values: STRING };
const DURATION = { type: "string", pattern: /^([0-9]+(\.[0-9]+)?(h|m|s|ms|us|µs|ns))+$/ };
const OBJECT_META = {
  type: "object",
  required: ["name"],
  properties: { name: STRING, namespace: STRING, labels: STRING_MAP, annotations: STRING_MAP },
};
const KEY_USAGES = [
  "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
  "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
  "server auth", "client auth", "code signing", "email protection", "s/mime",
  "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
  "microsoft sgc", "netscape sgc",
];
const CERT_MANAGER = {
  Issuer: {
    type: "object",
    required: ["spec"],
    properties: {
      metadata: OBJECT_META,
      spec: {
        type: "object",
        oneOf: ["selfSigned", "ca"],
        properties: {
          selfSigned: { type: "object", properties: { crlDistributionPoints: STRINGS } },
          ca: {
            type: "object",
            required: ["secretName"],
            properties: {
              secretName: STRING, crlDistributionPoints: STRINGS, ocspServers: STRINGS,
              issuingCertificateURLs: STRINGS,
            },
          },
        },
      },
    },
  },
  Certificate: {
    type: "object",
    required: ["spec"],
    properties: {
      metadata: OBJECT_META,
      spec: {
        type: "object",
        required: ["secretName", "issuerRef"],
        // The webhook refuses a certificate that names nothing.
        anyOf: ["commonName", "dnsNames", "ipAddresses", "uris", "emailAddresses"],
        properties: {
          secretName: STRING,
          issuerRef: {
            type: "object",
            required: ["name"],
            properties: { name: STRING, kind: { type: "string", enum: ["Issuer", "ClusterIssuer"] }, group: STRING },
          },
          commonName: { type: "string", maxLength: 64 },
          dnsNames: STRINGS, ipAddresses: STRINGS, uris: STRINGS, emailAddresses: STRINGS,
          duration: DURATION,
          renewBefore: DURATION,
          isCA: { type: "boolean" },
          usages: { type: "array", items: { type: "string", enum: KEY_USAGES } },
          privateKey: {
            type: "object",
            properties: {
              algorithm: { type: "string", enum: ["RSA", "ECDSA", "Ed25519"] },
              size: { type: "integer" },
              encoding: { type: "string", enum: ["PKCS1", "PKCS8"] },
              rotationPolicy: { type: "string", enum: ["Never", "Always"] },
            },
          },
          secretTemplate: { type: "object", properties: { annotations: STRING_MAP, labels: STRING_MAP } },
          subject: {
            type: "object",
            properties: {
              organizations: STRINGS, countries: STRINGS, organizationalUnits: STRINGS,
              localities: STRINGS, provinces: STRINGS, streetAddresses: STRINGS,
              postalCodes: STRINGS, serialNumber: STRING,
            },
          },
          revisionHistoryLimit: { type: "integer" },
        },
      },
    },
  },
};

// Checks `value` against one of the schemas above; problems as
// "<path>: <what>", in the validator's own words.
function checkSchema(value, schema, at, out) {
  const where = at || "/";
  switch (schema.type) {
    case "string":
      if (typeof value !== "string") return out.push(`${where}: must be string`);
      if (schema.enum && !schema.enum.includes(value)) {
        return out.push(`${where}: must be one of ${schema.enum.join(", ")}`);
      }
      if (schema.pattern && !schema.pattern.test(value)) {
        return out.push(`${where}: must match ${schema.pattern}`);
      }
      if (schema.maxLength !== undefined && value.length > schema.maxLength) {
        return out.push(`${where}: must NOT have more than ${schema.maxLength} characters`);
      }
      return;
    case "boolean":
      if (typeof value !== "boolean") out.push(`${where}: must be boolean`);
      return;
    case "integer":
      if (!Number.isInteger(value)) out.push(`${where}: must be integer`);
      return;
    case "array":
      if (!Array.isArray(value)) return out.push(`${where}: must be array`);
      value.forEach((item, i) => checkSchema(item, schema.items, `${at}/${i}`, out));
      return;
    case "map":
      if (value === null || typeof value !== "object" || Array.isArray(value)) {
        return out.push(`${where}: must be object`);
      }
      for (const [k, v] of Object.entries(value)) checkSchema(v, schema.values, `${at}/${k}`, out);
      return;
    case "object": {
      if (value === null || typeof value !== "object" || Array.isArray(value)) {
        return out.push(`${where}: must be object`);
      }
      for (const key of schema.required ?? []) {
        if (!(key in value)) out.push(`${where}: must have required property ${key}`);
      }
      if (schema.oneOf && schema.oneOf.filter((k) => k in value).length !== 1) {
        out.push(`${where}: must have exactly one of ${schema.oneOf.join(", ")}`);
      }
      if (schema.anyOf && !schema.anyOf.some((k) => k in value)) {
        out.push(`${where}: must have one of ${schema.anyOf.join(", ")}`);
      }
      for (const [key, v] of Object.entries(value)) {
        const property = schema.properties?.[key];
        if (property === undefined) {
          out.push(`${at}/${key}: unknown field`);
        } else {
          checkSchema(v, property, `${at}/${key}`, out);
        }
      }
      return;
    }
    default:
      throw new Error(`bad schema type ${schema.type}`);
  }
}

function validateCertManager(doc) {
  const schema = CERT_MANAGER[doc.kind];
  if (!schema) {
    return [`apiVersion "cert-manager.io/v1" kind ${JSON.stringify(doc.kind)}: not in this validator's cert-manager allowance (Issuer, Certificate)`];
  }
  const { apiVersion, kind, ...rest } = doc;
  const problems = [];
  checkSchema(rest, schema, "", problems);
  if (problems.length === 0) problems.push(...serverRules(doc));
  return problems;
}

function describe(doc, index, file) {
  const name = doc?.metadata?.name ?? "<no name>";
  return `${file}#${index} ${doc?.kind ?? "<no kind>"}/${name}`;
}

async function validateDoc(doc) {
  const problems = [];
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    return ["not an object"];
  }
  // The package also carries API versions that Kubernetes no longer serves
  // (extensions/v1beta1, policy/v1beta1, ...): accept stable versions only.
  if (typeof doc.apiVersion === "string" && /v[0-9]+(alpha|beta)[0-9]*$/.test(doc.apiVersion)) {
    return [`apiVersion ${doc.apiVersion}: pre-release API version; use a stable (v1, v2) one`];
  }
  if (doc.apiVersion === "cert-manager.io/v1") return validateCertManager(doc);
  const model = await loadModel(doc.apiVersion, doc.kind);
  if (!model) {
    return [`apiVersion ${JSON.stringify(doc.apiVersion)} kind ${JSON.stringify(doc.kind)}: not a Kubernetes API type`];
  }
  // Plain data: what the API server would decode.
  const data = JSON.parse(JSON.stringify(doc));
  const { proxy, seen } = trackAll(data);
  // The model's validate() runs the generated validator on `this`.
  try {
    model.prototype.validate.call(proxy);
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    for (const err of e.errors) {
      problems.push(`${err.instancePath || "/"}: ${err.message}`);
    }
  }
  // apiVersion and kind are read by the loader, not by the schema.
  seen.get(data).add("apiVersion");
  seen.get(data).add("kind");
  unknownFields(data, seen, "", problems);
  if (problems.length === 0) problems.push(...serverRules(data));
  return problems;
}

async function main(argv) {
  if (argv.length === 0) die("usage: node validate.mjs FILE.yaml... (- for stdin)");
  checkInstalled();
  const require = createRequire(import.meta.url);
  const YAML = require(path.join(here, "node_modules", "yaml"));
  let objects = 0;
  let failures = 0;
  for (const file of argv) {
    const text = readFileSync(file === "-" ? 0 : file, "utf8");
    const docs = YAML.parseAllDocuments(text, { uniqueKeys: true, version: "1.1" });
    for (const [i, d] of docs.entries()) {
      if (d.errors.length > 0) {
        console.log(`${file}#${i}: YAML error: ${d.errors[0].message}`);
        failures++;
        continue;
      }
      const doc = d.toJS({ maxAliasCount: -1 });
      if (doc === null || doc === undefined) continue; // empty document
      objects++;
      const problems = await validateDoc(doc);
      for (const p of problems) console.log(`${describe(doc, i, file)}: ${p}`);
      if (problems.length > 0) failures++;
    }
  }
  if (objects === 0) {
    console.log("validate: no objects found");
    process.exit(1);
  }
  console.log(`validate: ${objects} objects, ${failures} invalid`);
  process.exit(failures === 0 ? 0 : 1);
}

await main(process.argv.slice(2));
