// Server-Sent Events over fetch(): EventSource cannot send an Authorization header, so the
// stream is read from a ReadableStream and parsed here (id:/event:/data: lines, ':' comments).
// The last processed `id` is kept; after any drop (network error, stream end, a stall, the
// tab waking up, the network coming back) the stream reconnects with `Last-Event-ID`, with
// exponential backoff, and the server continues after that id exactly once.

import { authHeaders, ApiError } from './api.js';

const STALL_MS = 40_000; // keep-alives come every 15 s by default; silence this long = dead

export class SseStream {
  /**
   * @param {string} url
   * @param {{onEvent: (ev: {id: string|null, event: string, data: string}) => void,
   *          onStatus?: (status: 'connecting'|'live'|'reconnecting'|'offline'|'closed', detail?: string) => void,
   *          onUnauthorized?: (err: ApiError) => void, lastId?: string|null}} opts
   */
  constructor(url, opts) {
    this.url = url;
    this.opts = opts;
    this.lastId = opts.lastId ?? null;
    this.stopped = false;
    this.attempt = 0;
    this.controller = null;
    this.wake = null;
    this.lastActivity = Date.now();
    this.status = null;
    this.onVisible = () => { if (document.visibilityState === 'visible') this.poke(); };
    this.onOnline = () => this.poke(true);
    this.onOffline = () => { this.setStatus('offline'); this.abortCurrent(); };
    this.timer = null;
    this.connectStarted = 0;
  }

  start() {
    document.addEventListener('visibilitychange', this.onVisible);
    window.addEventListener('online', this.onOnline);
    window.addEventListener('offline', this.onOffline);
    this.timer = setInterval(() => {
      const now = Date.now();
      // A live stream gone silent, or a connection attempt that never got its answer.
      const silent = this.status === 'live' && now - this.lastActivity > STALL_MS;
      const hung = this.controller && this.status !== 'live' && now - this.connectStarted > STALL_MS;
      if (silent || hung) this.abortCurrent();
    }, 5_000);
    this.loop();
    return this;
  }

  stop() {
    this.stopped = true;
    document.removeEventListener('visibilitychange', this.onVisible);
    window.removeEventListener('online', this.onOnline);
    window.removeEventListener('offline', this.onOffline);
    clearInterval(this.timer);
    this.abortCurrent();
    if (this.wake) this.wake();
    this.setStatus('closed');
  }

  /** Reconnect now: skip the backoff, or drop a connection that went quiet (laptop sleep). */
  poke(force = false) {
    if (this.stopped) return;
    if (this.wake) { this.attempt = 0; this.wake(); return; }
    if (force || Date.now() - this.lastActivity > STALL_MS) this.abortCurrent();
  }

  abortCurrent() {
    if (this.controller) this.controller.abort();
  }

  setStatus(s, detail) {
    this.status = s;
    this.opts.onStatus?.(s, detail);
  }

  async loop() {
    while (!this.stopped) {
      this.setStatus(this.attempt === 0 && this.lastId === null ? 'connecting' : 'reconnecting');
      const controller = new AbortController();
      this.controller = controller;
      this.connectStarted = Date.now();
      let detail = '';
      try {
        const headers = authHeaders({ Accept: 'text/event-stream' });
        if (this.lastId !== null) headers['Last-Event-ID'] = this.lastId;
        const res = await fetch(this.url, { headers, signal: controller.signal, cache: 'no-store' });
        if (res.status === 401) {
          let body = {};
          try { body = await res.json(); } catch { /* ignore */ }
          const err = new ApiError(401, body?.error?.code, body?.error?.message);
          this.opts.onUnauthorized?.(err);
          this.stop();
          return;
        }
        if ([400, 403, 404, 410, 422].includes(res.status)) {
          // Not something a retry fixes (no such task, not yours): stop and say so.
          this.stop();
          this.setStatus('closed', `HTTP ${res.status}`);
          return;
        }
        if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
        this.lastActivity = Date.now();
        this.setStatus('live');
        await this.read(res.body, controller);
        detail = 'the stream ended';
      } catch (e) {
        detail = e?.name === 'AbortError' ? 'connection dropped' : (e?.message || String(e));
      } finally {
        this.controller = null;
      }
      if (this.stopped) return;
      this.attempt += 1;
      const delay = Math.min(30_000, 500 * 2 ** Math.min(this.attempt - 1, 6)) * (0.75 + Math.random() * 0.5);
      this.setStatus(navigator.onLine === false ? 'offline' : 'reconnecting', detail);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, navigator.onLine === false ? 3_600_000 : delay);
        this.wake = () => { clearTimeout(t); resolve(); };
      });
      this.wake = null;
    }
  }

  async read(body, controller) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    const abort = () => reader.cancel().catch(() => {});
    controller.signal.addEventListener('abort', abort);
    let buf = '';
    let ev = { id: undefined, event: '', data: [] };
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        if (controller.signal.aborted) break;
        this.lastActivity = Date.now();
        if (this.attempt !== 0) this.attempt = 0;
        buf += value;
        let m;
        while ((m = /\r\n|\r|\n/.exec(buf))) {
          // A lone '\r' at the end may be the first half of '\r\n': wait for more.
          if (m[0] === '\r' && m.index === buf.length - 1) break;
          const line = buf.slice(0, m.index);
          buf = buf.slice(m.index + m[0].length);
          if (line === '') {
            if (ev.data.length || ev.event || ev.id !== undefined) this.dispatch(ev);
            ev = { id: undefined, event: '', data: [] };
            continue;
          }
          if (line[0] === ':') continue; // comment / keep-alive
          const i = line.indexOf(':');
          const name = i < 0 ? line : line.slice(0, i);
          let val = i < 0 ? '' : line.slice(i + 1);
          if (val[0] === ' ') val = val.slice(1);
          if (name === 'data') ev.data.push(val);
          else if (name === 'event') ev.event = val;
          else if (name === 'id' && !val.includes('\0')) ev.id = val;
        }
      }
    } finally {
      controller.signal.removeEventListener('abort', abort);
    }
    if (controller.signal.aborted) throw new DOMException('aborted', 'AbortError');
  }

  dispatch(ev) {
    if (ev.id !== undefined) this.lastId = ev.id;
    if (!ev.data.length) return;
    try {
      this.opts.onEvent({ id: ev.id ?? null, event: ev.event || 'message', data: ev.data.join('\n') });
    } catch (e) {
      console.error('stream handler failed', e);
    }
  }
}
