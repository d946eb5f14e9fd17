/**
 * A fixed-size sketch of a distribution, for `stats` figures over any number of rows: values
 * below 1024 are counted exactly, larger ones in log-spaced buckets no wider than 0.2% of
 * their value (tool calls and turns are exact in practice; token quantiles are approximate to
 * that bound, and say so). Mean, quantiles, max, and a histogram of at most a few bins.
 */
export interface Distribution {
  /** Trajectories that had the value. */
  count: number;
  mean: number | null;
  min: number | null;
  p50: number | null;
  p90: number | null;
  max: number | null;
  /** false when p50 or p90 fell in a bucket wider than one value (only above 1024): then within 0.2%. */
  quantiles_exact: boolean;
}

export interface HistogramBin {
  from: number;
  to: number;
  count: number;
}

/** Values below 2^SUB_BITS get a bucket each; above, buckets keep the top SUB_BITS bits. */
const SUB_BITS = 10;
const EXACT_BELOW = 1 << SUB_BITS;
const HALF = EXACT_BELOW >> 1;
/** Enough buckets for any double up to 2^53. */
const BUCKETS = EXACT_BELOW + (53 - SUB_BITS) * HALF;

function log2Floor(v: number): number {
  if (v < 2 ** 31) return 31 - Math.clz32(v);
  let e = Math.floor(Math.log2(v));
  // Math.log2 can round across a power of two.
  if (2 ** e > v) e--;
  else if (2 ** (e + 1) <= v) e++;
  return e;
}

function bucketOf(v: number): number {
  if (v < EXACT_BELOW) return v;
  const e = log2Floor(v);
  const shift = e - SUB_BITS + 1;
  const mant = Math.floor(v / 2 ** shift);
  return EXACT_BELOW + (e - SUB_BITS) * HALF + (mant - HALF);
}

/** The values a bucket holds, inclusive. */
function bucketRange(i: number): [number, number] {
  if (i < EXACT_BELOW) return [i, i];
  const j = i - EXACT_BELOW;
  const shift = Math.floor(j / HALF) + 1;
  const mant = HALF + (j % HALF);
  return [mant * 2 ** shift, (mant + 1) * 2 ** shift - 1];
}

/** Counts of non-negative integers: exact below 1024, within 0.2% above. Fixed size (~180 KB). */
export class Sketch {
  readonly #counts = new Float64Array(BUCKETS);
  #n = 0;
  #sum = 0;
  #min = Infinity;
  #max = -Infinity;

  /** Non-finite and negative values are ignored; fractions are rounded for bucketing (the mean keeps them). */
  add(value: number): void {
    if (!(value >= 0) || value === Infinity) return;
    this.#counts[bucketOf(Math.min(Math.round(value), 2 ** 53 - 1))]!++;
    this.#n++;
    this.#sum += value;
    if (value < this.#min) this.#min = value;
    if (value > this.#max) this.#max = value;
  }

  get count(): number {
    return this.#n;
  }

  /** Nearest rank: the smallest value with at least ⌈q·n⌉ values at or below it. */
  quantile(q: number): { value: number; exact: boolean } | null {
    if (this.#n === 0) return null;
    const rank = Math.max(1, Math.ceil(q * this.#n));
    // The ends are known exactly whatever their bucket.
    if (rank === 1) return { value: this.#min, exact: true };
    if (rank === this.#n) return { value: this.#max, exact: true };
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.#counts[i]!;
      if (seen >= rank) {
        const [lo, hi] = bucketRange(i);
        if (lo === hi) return { value: lo, exact: true };
        // A bucket's values are unknown: its midpoint, never outside what was seen.
        const from = Math.max(lo, this.#min);
        const to = Math.min(hi, this.#max);
        return { value: Math.round((from + to) / 2), exact: from === to };
      }
    }
    return { value: this.#max, exact: true };
  }

  summary(): Distribution {
    const p50 = this.quantile(0.5);
    const p90 = this.quantile(0.9);
    return {
      count: this.#n,
      mean: this.#n ? this.#sum / this.#n : null,
      min: this.#n ? this.#min : null,
      p50: p50?.value ?? null,
      p90: p90?.value ?? null,
      max: this.#n ? this.#max : null,
      quantiles_exact: (p50?.exact ?? true) && (p90?.exact ?? true),
    };
  }

  /** At most `maxBins` bins of equal, round width (1, 2, 5 × 10^k) covering min..max. */
  histogram(maxBins = 10): HistogramBin[] {
    if (this.#n === 0) return [];
    const min = Math.floor(this.#min);
    const max = Math.floor(this.#max);
    let width = 1;
    for (let k = 1; (max - min + 1) / width > maxBins; ) {
      for (const m of [2, 5, 10]) {
        width = m * k;
        if ((max - min + 1) / width <= maxBins) break;
      }
      k *= 10;
    }
    const start = Math.floor(min / width) * width;
    const bins: HistogramBin[] = [];
    for (let lo = start; lo <= max; lo += width) bins.push({ from: lo, to: lo + width - 1, count: 0 });
    for (let i = 0; i < BUCKETS; i++) {
      const c = this.#counts[i]!;
      if (c === 0) continue;
      const [lo, hi] = bucketRange(i);
      const v = Math.min(max, Math.max(min, lo === hi ? lo : Math.round((lo + hi) / 2)));
      bins[Math.min(bins.length - 1, Math.floor((v - start) / width))]!.count += c;
    }
    return bins;
  }
}
