// Opens each HTML page given on the command line in headless Chromium at a
// 1280 px viewport and fails when a reader would see something wrong:
// a console error, a chart without drawn data, a page wider than the
// window. Saves a full-page screenshot of each, and one of each view
// (load curves, a benchmark's charts, the comparison table) for the docs.
//
// usage: node check.mjs OUT_DIR PAGE.html [PAGE.html ...]
import { chromium } from 'playwright-core';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [outDir, ...pages] = process.argv.slice(2);
if (!outDir || pages.length === 0) {
  console.error('usage: node check.mjs OUT_DIR PAGE.html [PAGE.html ...]');
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });

// Chromium now and then dies while it starts (a SIGSEGV before any page
// opens, seen once in CI). That says nothing of the pages, so the launch is
// tried up to three times, each with a fresh profile (playwright passes it
// as --user-data-dir); a page that fails once opened still fails the check.
async function launch() {
  for (let attempt = 1; ; attempt++) {
    const dir = mkdtempSync(join(tmpdir(), 'guidebench-chromium-'));
    try {
      const context = await chromium.launchPersistentContext(dir, {
        executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
        headless: true,
        viewport: { width: 1280, height: 900 },
        args: [
          '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
          '--disable-background-networking', '--disable-component-update', '--disable-sync',
        ],
      });
      return { context, dir };
    } catch (e) {
      rmSync(dir, { recursive: true, force: true });
      if (attempt === 3) throw e;
      console.log(`Chromium did not start (attempt ${attempt} of 3): ${e.message.split('\n')[0]}`);
    }
  }
}
const { context: browser, dir: profile } = await launch();

const failures = [];
try {
  for (const page of pages) {
    const name = basename(page, '.html');
    const tab = await browser.newPage();
    const problems = [];
    tab.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
    tab.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    // The page must load nothing: any request but the page itself fails it.
    const url = pathToFileURL(resolve(page)).href;
    tab.on('request', (r) => { if (r.url() !== url) problems.push(`loads ${r.url()}`); });
    await tab.goto(url, { waitUntil: 'load' });

    const facts = await tab.evaluate(() => {
      const charts = [...document.querySelectorAll('svg.chart')].map((svg) => {
        const box = svg.getBoundingClientRect();
        const drawn = [...svg.querySelectorAll('path.series, circle')].filter((el) => {
          const b = el.getBBox();
          return el.tagName === 'circle' || b.width > 0 || b.height > 0;
        }).length;
        return {
          title: svg.getAttribute('aria-label'),
          points: Number(svg.dataset.points),
          drawn,
          width: box.width,
          right: box.right,
        };
      });
      return {
        charts,
        scrollWidth: document.documentElement.scrollWidth,
        clientWidth: document.documentElement.clientWidth,
        widest: Math.max(...[...document.body.querySelectorAll('*')].map((e) => e.getBoundingClientRect().right)),
      };
    });
    if (facts.charts.length === 0) problems.push('no chart on the page');
    for (const c of facts.charts) {
      if (!(c.points > 0) || c.drawn === 0) problems.push(`chart "${c.title}" has no drawn data`);
      if (c.width < 200) problems.push(`chart "${c.title}" is ${c.width} px wide`);
    }
    if (facts.scrollWidth > 1280 || facts.scrollWidth > facts.clientWidth) {
      problems.push(`the page scrolls sideways: ${facts.scrollWidth} px wide in ${facts.clientWidth} px`);
    }
    if (facts.widest > 1280) problems.push(`an element reaches ${facts.widest} px`);

    await tab.screenshot({ path: join(outDir, `${name}.png`), fullPage: true });
    // One screenshot per view, for the docs.
    const views = {
      summary: 'h1',
      load: '#load',
      deltas: '#deltas',
    };
    for (const [view, selector] of Object.entries(views)) {
      const el = await tab.$(selector);
      if (!el) continue;
      await tab.evaluate((s) => document.querySelector(s).scrollIntoView(), selector);
      const top = await el.evaluate((e) => e.getBoundingClientRect().top + window.scrollY);
      await tab.screenshot({
        path: join(outDir, `${name}-${view}.png`),
        clip: { x: 0, y: Math.max(0, top - 8), width: 1280, height: 720 },
        fullPage: true,
      });
    }
    const first = await tab.$('h3[id^="b-"]');
    if (first) {
      const top = await first.evaluate((e) => e.getBoundingClientRect().top + window.scrollY);
      await tab.screenshot({
        path: join(outDir, `${name}-benchmark.png`),
        clip: { x: 0, y: top - 8, width: 1280, height: 900 },
        fullPage: true,
      });
    }
    await tab.close();
    const verdict = problems.length === 0 ? 'ok' : 'FAILED';
    console.log(`${page}: ${facts.charts.length} charts, ${facts.scrollWidth} px wide: ${verdict}`);
    for (const p of problems) {
      console.log(`  ${p}`);
      failures.push(`${page}: ${p}`);
    }
  }
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failures.length === 0 ? 0 : 1);
