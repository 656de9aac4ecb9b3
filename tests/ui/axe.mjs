// Accessibility audit of the page as it is: axe-core (npm, installed beside playwright-core)
// evaluated in the page, WCAG 2.1 A and AA rules. Violations of impact "serious" or
// "critical" fail the step that asked; lesser ones are printed.

import { readFileSync } from 'node:fs';

const AXE = process.env.AXE_CORE
  || '/var/tmp/maestro-tools/playwright/node_modules/axe-core/axe.min.js';
const source = readFileSync(AXE, 'utf8');

/** Audit `page`; throws with the serious and critical violations listed. */
export async function audit(page, name) {
  // Evaluated through the DevTools protocol, so the page's CSP (no inline scripts) allows it.
  await page.evaluate(source);
  const result = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } });
    return r.violations.map((v) => ({
      id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')),
    }));
  });
  const bad = result.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  for (const v of result.filter((x) => !bad.includes(x))) {
    console.log(`# a11y ${name}: ${v.impact} ${v.id} (${v.help}) at ${v.nodes.join(', ')}`);
  }
  if (bad.length) {
    throw new Error(`accessibility (${name}): ${bad.map((v) => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.join(', ')}`).join('; ')}`);
  }
}
