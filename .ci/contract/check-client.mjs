#!/usr/bin/env node
// check-client.mjs SPEC CLIENT_TS
// Checks that client.ts cannot fall behind the contract: its `steps` object
// has exactly one step per operationId of SPEC, and each step's first call is
// that operation's own method and path. (tsc checks the same key set through
// the generated `operations` type; this also ties each key to its call.)
// Last line:  check-client: N operations, M problems
import fs from 'node:fs';
import yaml from 'js-yaml';

const [specFile, clientFile] = process.argv.slice(2);
const spec = yaml.load(fs.readFileSync(specFile, 'utf8'));
const methods = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const want = new Map();
for (const [path, item] of Object.entries(spec.paths ?? {})) {
  for (const m of methods) if (item?.[m]) want.set(item[m].operationId, `${m.toUpperCase()} ${path}`);
}

const src = fs.readFileSync(clientFile, 'utf8');
const start = src.indexOf('export const steps = {');
const end = src.indexOf('} satisfies { [K in OperationId]: Step };');
const problems = [];
if (start < 0 || end < 0) problems.push('no `export const steps = { ... } satisfies { [K in OperationId]: Step }` in client.ts');
const block = src.slice(start, end);
// A step starts with "  <operationId>: async (ctx) => {" at two spaces of indent.
const heads = [...block.matchAll(/^ {2}([A-Za-z0-9_]+): async \(ctx\) => \{$/gm)];
const seen = new Set();
heads.forEach((h, i) => {
  const id = h[1];
  const body = block.slice(h.index, i + 1 < heads.length ? heads[i + 1].index : block.length);
  if (seen.has(id)) problems.push(`${id}: more than one step`);
  seen.add(id);
  if (!want.has(id)) { problems.push(`${id}: not an operationId of the contract`); return; }
  const call = body.match(/\.(GET|PUT|POST|DELETE|OPTIONS|HEAD|PATCH|TRACE)\(\s*"([^"]+)"/);
  const got = call ? `${call[1]} ${call[2]}` : 'no call';
  if (got !== want.get(id)) problems.push(`${id}: first call is ${got}, want ${want.get(id)}`);
});
for (const id of want.keys()) if (!seen.has(id)) problems.push(`${id}: no step in client.ts`);
for (const p of problems) console.log(`  ${p}`);
console.log(`check-client: ${want.size} operations, ${seen.size} steps, ${problems.length} problems`);
process.exit(problems.length ? 1 : 0);
