#!/usr/bin/env node
// build.mjs: bundles src/main.tsx into dist/ with esbuild (pinned in
// package-lock.json): one JavaScript and one CSS file named by their content
// hash (served as immutable), and index.html (served with no-cache) that
// names them. The output depends only on the sources and the lock file, so
// CI can rebuild it and fail on any difference from the committed dist/.
import fs from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';

const here = path.dirname(new URL(import.meta.url).pathname);
const out = path.join(here, 'dist');
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(out, { recursive: true });

const result = await build({
  absWorkingDir: here,
  entryPoints: ['src/main.tsx'],
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2022'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  entryNames: 'console-[hash]',
  outdir: out,
  metafile: true,
  legalComments: 'eof',
  charset: 'utf8',
  logLevel: 'warning',
});

const files = Object.keys(result.metafile.outputs).map((f) => path.basename(f));
const js = files.find((f) => f.endsWith('.js'));
const css = files.find((f) => f.endsWith('.css'));
if (!js || !css) throw new Error(`esbuild produced ${files.join(', ')}`);
const html = fs.readFileSync(path.join(here, 'src', 'index.html'), 'utf8')
  .replace('{{CSS}}', `/console/${css}`)
  .replace('{{JS}}', `/console/${js}`);
fs.writeFileSync(path.join(out, 'index.html'), html);
for (const f of fs.readdirSync(out).sort()) console.log(`web: dist/${f} (${fs.statSync(path.join(out, f)).size} bytes)`);
