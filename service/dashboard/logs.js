// service/dashboard/logs.js - a job's log tail (GET /v1/jobs/{id}/logs):
// the last 64 KiB of stdout or stderr at first, then what was appended
// since (offset = the previous next_offset) while "follow" is on. At most
// 256 KiB of text is kept on the page.
import { request } from './api.js';
import { fmtBytes, h } from './ui.js';

const CHUNK = 65536;
const KEEP = 262144;
const READS_PER_REFRESH = 4;

export class LogPanel {
  constructor(jobId, ctx) {
    this.jobId = jobId;
    this.ctx = ctx;
    this.stream = 'stdout';
    this.next = null;       // the offset to read from; null: start from the tail
    this.text = '';
    this.size = 0;
    this.dropped = false;   // the text shown does not start at the file's start
    this.gen = 0;
    this.final = false;
    this.streamSel = h('select', { id: 'log-stream', class: 'input input-small',
                                   dataset: { testid: 'logs-stream' } },
                       h('option', { value: 'stdout' }, 'stdout'),
                       h('option', { value: 'stderr' }, 'stderr'));
    this.followBox = h('input', { id: 'log-follow', type: 'checkbox', checked: true,
                                  dataset: { testid: 'logs-follow' } });
    this.controls = [
      h('label', { for: 'log-stream', class: 'label label-inline' }, 'Stream'), this.streamSel,
      h('label', { class: 'check', for: 'log-follow' }, this.followBox, ' Follow'),
    ];
    this.info = h('p', { class: 'muted small', dataset: { testid: 'logs-info' } });
    this.pre = h('pre', { class: 'log', role: 'log', tabindex: 0, 'aria-label': 'Log output',
                          dataset: { testid: 'logs' } });
    this.el = h('div', { class: 'logs' }, this.info, this.pre);
    this.streamSel.addEventListener('change', () => {
      this.stream = this.streamSel.value;
      this.next = null;
      this.text = '';
      this.gen++;
      this.refresh().catch((e) => ctx.fail(e, 'Logs'));
    });
    this.followBox.addEventListener('change', () => {
      this.render();
      if (this.followBox.checked)
        this.refresh().catch((e) => ctx.fail(e, 'Logs')).then(() => this.scroll());
    });
  }

  following() {
    return this.followBox.checked;
  }

  setFinal(f) {
    this.final = f;
  }

  path(offset, limit) {
    return `/v1/jobs/${this.jobId}/logs?stream=${this.stream}&offset=${offset}&limit=${limit}`;
  }

  async get(offset, limit) {
    return request('GET', this.path(offset, limit), { signal: this.ctx.signal });
  }

  async refresh() {
    const gen = this.gen;
    if (this.next === null) {                  // the log's end, in one read
      const d = (await request('GET', `/v1/jobs/${this.jobId}/logs?stream=${this.stream}&tail=${CHUNK}`,
                               { signal: this.ctx.signal })).data;
      let text = d.data || '';
      const nl = text.indexOf('\n');
      if (d.offset > 0 && nl >= 0)             // from the first whole line
        text = text.slice(nl + 1);
      if (gen !== this.gen)
        return;
      this.text = text;
      this.dropped = d.offset > 0;
      this.next = d.next_offset;
      this.size = d.size;
      this.render();
      return;
    }
    let grew = false;
    for (let i = 0; i < READS_PER_REFRESH; i++) {
      const r = await this.get(this.next, CHUNK);
      if (gen !== this.gen)
        return;
      const d = r.data;
      if (d.size < this.next) {                 // the file is shorter: start over
        this.next = null;
        return this.refresh();
      }
      this.size = d.size;
      if (!d.data)
        break;
      this.text += d.data;
      this.next = d.next_offset;
      grew = true;
      if (d.next_offset >= d.size)
        break;
    }
    if (this.text.length > KEEP) {
      const cut = this.text.indexOf('\n', this.text.length - KEEP);
      this.text = this.text.slice(cut < 0 ? this.text.length - KEEP : cut + 1);
      this.dropped = true;
    }
    if (grew)
      this.render();
  }

  render() {
    const atBottom = this.pre.scrollHeight - this.pre.scrollTop - this.pre.clientHeight < 24;
    this.pre.textContent = this.text || (this.final ? '(empty)' : '(nothing yet)');
    this.info.textContent = `${this.stream}: ${fmtBytes(this.size)}` +
      (this.dropped ? ', showing its end' : '') +
      (this.final ? '' : this.following() ? ', following' : ', paused');
    if (this.following() || atBottom)
      this.scroll();
  }

  scroll() {
    this.pre.scrollTop = this.pre.scrollHeight;
  }
}
