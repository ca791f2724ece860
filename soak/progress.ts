/**
 * A progress bar on stderr, one line redrawn with \r: done/total, %, rate, faults fired, restarts,
 * elapsed. When stderr is not a terminal (CI logs) it prints a plain line every 10 s instead.
 */

export interface ProgressState {
  done: number;
  total: number;
  faultsFired: number;
  restarts: number;
  inFlight: number;
  phase?: string;
}

export function formatDuration(ms: number): string {
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${h > 0 ? `${h}:` : ''}${pad(m)}:${pad(s % 60)}`;
}

export class ProgressBar {
  readonly #stream: NodeJS.WriteStream;
  readonly #started = Date.now();
  readonly #tty: boolean;
  #timer: NodeJS.Timeout | undefined;
  #lastPlain = 0;
  #width = 0;

  constructor(
    private readonly state: () => ProgressState,
    stream: NodeJS.WriteStream = process.stderr,
  ) {
    this.#stream = stream;
    this.#tty = Boolean(stream.isTTY);
  }

  start(intervalMs = 200): void {
    this.#timer = setInterval(() => this.render(), this.#tty ? intervalMs : 1000);
    this.#timer.unref();
    this.render();
  }

  line(): string {
    const s = this.state();
    const elapsed = Date.now() - this.#started;
    const fraction = s.total > 0 ? Math.min(1, s.done / s.total) : 1;
    const barWidth = 30;
    const filled = Math.round(fraction * barWidth);
    const bar = `${'█'.repeat(filled)}${'░'.repeat(barWidth - filled)}`;
    const rate = elapsed > 0 ? (s.done / elapsed) * 1000 : 0;
    const eta = rate > 0 && s.done < s.total ? ` eta ${formatDuration(((s.total - s.done) / rate) * 1000)}` : '';
    return (
      `${s.phase ? `${s.phase} ` : ''}${bar} ${s.done}/${s.total} ${(fraction * 100).toFixed(1)}% ` +
      `${rate.toFixed(1)}/s · in flight ${s.inFlight} · faults ${s.faultsFired} · restarts ${s.restarts} · ` +
      `${formatDuration(elapsed)}${eta}`
    );
  }

  render(): void {
    const text = this.line();
    if (this.#tty) {
      const padded = text.padEnd(this.#width);
      this.#width = text.length;
      this.#stream.write(`\r${padded}`);
    } else if (Date.now() - this.#lastPlain >= 10_000) {
      this.#lastPlain = Date.now();
      this.#stream.write(`${text}\n`);
    }
  }

  /** Writes a message above the bar without breaking it. */
  log(message: string): void {
    if (this.#tty) this.#stream.write(`\r${' '.repeat(this.#width)}\r${message}\n`);
    else this.#stream.write(`${message}\n`);
    this.#width = 0;
    if (this.#tty) this.render();
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#lastPlain = 0;
    if (this.#tty) {
      this.render();
      this.#stream.write('\n');
    } else {
      this.render();
    }
  }
}
