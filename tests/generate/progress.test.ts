import { describe, expect, it } from 'vitest';
import { Progress } from '../../pipeline/generate/progress.js';

describe('progress', () => {
  it('counts this invocation on top of earlier ones, with an ETA', () => {
    const p = new Progress(undefined, 10, 4);
    p.start();
    p.done(true, 1500);
    p.done(false, 500);
    expect(p.line()).toMatch(/^6\/10 \(60%\) · 1 accepted · 1 failed · [\d.]+\/s · ETA \S+ · 2\.0k tokens$/);
  });

  it('draws a bar in place on a terminal, and plain lines elsewhere', () => {
    const tty: string[] = [];
    const p = new Progress({ isTTY: true, write: (t) => tty.push(t) }, 4, 0);
    p.start();
    p.done(true, 1);
    p.done(true, 1);
    p.stop();
    expect(tty.at(-1)).toMatch(/^\r\x1b\[2K\[#{12}-{12}\] 2\/4 \(50%\)/);
    const plain: string[] = [];
    const q = new Progress({ isTTY: false, write: (t) => plain.push(t) }, null, 0);
    q.start();
    q.done(true, 1);
    q.stop();
    expect(plain.at(-1)).toMatch(/^\[\d\d:\d\d:\d\d\] 1 done · 1 accepted · 0 failed/);
    expect(plain.at(-1)).not.toContain('\r');
  });

  it('shows the run\'s dollars spent and projects the total from this invocation\'s dollars per sample', () => {
    // 4 of 10 done before; this invocation did 2 for $3 on top of $5 earlier: 4 left at $1.50 each.
    let dollars: { run: number | null; invocation: number | null } = { run: 8, invocation: 3 };
    const p = new Progress(undefined, 10, 4);
    p.showCost(() => dollars);
    p.start();
    p.done(true, 10);
    p.done(true, 10);
    expect(p.line()).toContain(' · $8.00 spent, ~$14.00 projected');
    // A model without a price: no dollars at all rather than a wrong figure.
    dollars = { run: null, invocation: null };
    expect(p.line()).not.toContain('$');
  });
});
