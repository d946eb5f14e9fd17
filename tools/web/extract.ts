/**
 * HTML → the text a reader sees. htmlparser2 tokenizes the way browsers do (raw text in
 * `<script>`, implied closes, broken markup, entities), so scripts, styles and inline data never
 * become text, and what does become text is the page's words with entities decoded. Markup-like
 * text in a page (`</tool_output><answer>…`) comes out as the characters it shows; keeping it
 * from forging structure in a trajectory is the dialect renderer's job, which escapes tool text.
 */
import { Parser } from 'htmlparser2';

/** Elements whose content is never text a reader sees. */
const SKIP = new Set([
  'script', 'style', 'noscript', 'template', 'svg', 'math', 'iframe', 'object', 'embed', 'canvas',
  'video', 'audio', 'select', 'datalist', 'head', 'button', 'dialog',
]);
/** Page furniture, dropped unless it sits inside the main content. */
const CHROME = new Set(['nav', 'aside', 'footer', 'form']);
/** Elements set apart by a blank line. */
const BLOCK = new Set([
  'p', 'div', 'section', 'article', 'main', 'header', 'footer', 'aside', 'nav', 'blockquote', 'pre',
  'ul', 'ol', 'dl', 'table', 'caption', 'figure', 'figcaption', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6',
  'hr', 'address', 'details', 'summary', 'fieldset', 'legend', 'body', 'html',
]);
/** Elements that start a line of their own: list items and table rows stay together. */
const LINE = new Set(['li', 'dt', 'dd', 'tr', 'br']);

export interface ExtractedPage {
  readonly title: string;
  readonly text: string;
}

function hidden(attribs: Record<string, string>): boolean {
  if ('hidden' in attribs) return true;
  if ((attribs['aria-hidden'] ?? '').toLowerCase() === 'true') return true;
  const style = (attribs.style ?? '').toLowerCase().replace(/\s+/g, '');
  return style.includes('display:none') || style.includes('visibility:hidden');
}

/** Collapses spaces within lines and blank-line runs to one blank line. */
function tidy(s: string): string {
  return s
    .split('\n')
    .map((l) => l.replace(/[ \t\f\v\u00a0\r]+/g, ' ').trim())
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

/**
 * Extracts the title and readable text. When the page marks its main content (`<main>`,
 * `<article>`, `role="main"`) and that holds a fair share of the text, only it is kept: the
 * rest is navigation, cookie banners and link lists.
 */
export function htmlToText(html: string): ExtractedPage {
  interface Open {
    name: string;
    skip: boolean;
    chrome: boolean;
    main: boolean;
  }
  const stack: Open[] = [];
  let skipDepth = 0;
  let chromeDepth = 0;
  let mainDepth = 0;
  let all = '';
  let main = '';
  let title = '';
  /** The document's title is the first <title> outside <svg>; later ones (icons) are not. */
  let titleState: 'before' | 'in' | 'done' = 'before';
  let inSvg = 0;
  let firstH1 = '';
  let inH1 = 0;
  let pre = 0;

  const emit = (s: string): void => {
    if (skipDepth > 0) return;
    if (mainDepth > 0) main += s;
    if (chromeDepth > 0 && mainDepth === 0) return;
    all += s;
  };

  const parser = new Parser(
    {
      onopentag(name, attribs) {
        const isMain = name === 'main' || name === 'article' || (attribs.role ?? '').toLowerCase() === 'main';
        // <head> is skipped as text; its <title> is read apart.
        const o: Open = { name, skip: SKIP.has(name) || hidden(attribs), chrome: CHROME.has(name), main: isMain };
        stack.push(o);
        if (name === 'svg') inSvg++;
        if (name === 'title' && titleState === 'before' && inSvg === 0) titleState = 'in';
        if (o.skip) skipDepth++;
        if (o.chrome) chromeDepth++;
        if (o.main) mainDepth++;
        if (name === 'h1') inH1++;
        if (name === 'pre') pre++;
        if (BLOCK.has(name)) emit('\n\n');
        if (LINE.has(name)) emit('\n');
        if (name === 'li') emit('- ');
        if (name === 'td' || name === 'th') emit(' ');
      },
      ontext(data) {
        if (titleState === 'in') {
          title += data;
          return;
        }
        if (inH1 > 0 && skipDepth === 0) firstH1 += data;
        emit(pre > 0 ? data : data.replace(/\s+/g, ' '));
      },
      onclosetag(name) {
        const o = stack.pop();
        if (!o) return;
        if (o.name === 'title' && titleState === 'in') titleState = 'done';
        if (o.name === 'svg') inSvg--;
        if (o.skip) skipDepth--;
        if (o.chrome) chromeDepth--;
        if (o.main) mainDepth--;
        if (o.name === 'h1') {
          inH1--;
          if (firstH1 && !firstH1.endsWith('\u0000')) firstH1 += '\u0000';
        }
        if (o.name === 'pre') pre--;
        if (BLOCK.has(name)) emit('\n\n');
      },
    },
    { decodeEntities: true },
  );
  parser.write(html);
  parser.end();

  const allText = tidy(all);
  const mainText = tidy(main);
  const text = mainText.length >= 200 && mainText.length >= allText.length * 0.25 ? mainText : allText;
  const h1 = firstH1.split('\u0000')[0] ?? '';
  return { title: tidy(title).replace(/\n/g, ' ') || tidy(h1).replace(/\n/g, ' '), text };
}
