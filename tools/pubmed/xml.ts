/**
 * PubMed's efetch XML (a PubmedArticleSet) → documents in the corpus server's shape.
 *
 * The XML is parsed in document order (`preserveOrder`) because titles and abstracts hold
 * inline markup — `<i>Escherichia coli</i>`, `CO<sub>2</sub>`, `<sup>+</sup>` — and a parser
 * that groups children by name would move that text out of its sentence.
 */
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import type { CorpusDoc } from '../corpus/search.js';
import { WireError } from '../../pipeline/errors.js';

/** One node of fast-xml-parser's ordered output: `{tag: children, ':@'?: attributes}` or `{'#text': text}`. */
type XNode = Record<string, unknown>;

/** The XML was not XML, or it was NCBI's `<ERROR>` instead of articles. */
export class PubmedXmlError extends WireError {
  constructor(
    message: string,
    /** true when the body was not XML at all (truncated, an HTML gateway page): worth retrying. */
    readonly malformed: boolean,
  ) {
    super(message);
    this.name = 'PubmedXmlError';
  }
}

const parser = new XMLParser({
  preserveOrder: true,
  ignoreAttributes: false,
  attributeNamePrefix: '',
  // Spaces around inline markup are part of the sentence: "of <i>E. coli</i> in".
  trimValues: false,
  // "1984" as a title stays a string; PMIDs keep their leading form.
  parseTagValue: false,
  parseAttributeValue: false,
  htmlEntities: true,
});

function tagOf(node: XNode): string | undefined {
  for (const k of Object.keys(node)) if (k !== ':@') return k;
  return undefined;
}

function kids(node: XNode | undefined): XNode[] {
  if (!node) return [];
  const tag = tagOf(node);
  const v = tag === undefined ? undefined : node[tag];
  return Array.isArray(v) ? (v as XNode[]) : [];
}

function attr(node: XNode | undefined, name: string): string | undefined {
  const a = node?.[':@'] as Record<string, unknown> | undefined;
  const v = a?.[name];
  return typeof v === 'string' ? v : undefined;
}

function all(nodes: XNode[], tag: string): XNode[] {
  return nodes.filter((n) => tagOf(n) === tag);
}

function first(nodes: XNode[], tag: string): XNode | undefined {
  return nodes.find((n) => tagOf(n) === tag);
}

/** Follows a path of tag names, first match at each step. */
function at(node: XNode | undefined, ...path: string[]): XNode | undefined {
  let cur = node;
  for (const tag of path) cur = first(kids(cur), tag);
  return cur;
}

/**
 * All text under a node, in document order, markup dropped. A superscript right after a digit
 * is a power and keeps a caret ("10<sup>5</sup>" → "10^5"); elsewhere it is a charge or a
 * footnote mark and joins the text ("Ca<sup>2+</sup>" → "Ca2+").
 */
function rawText(node: XNode | undefined): string {
  if (!node) return '';
  if (typeof node['#text'] === 'string') return node['#text'];
  let out = '';
  for (const k of kids(node)) {
    if (tagOf(k) === 'sup' && /\d$/.test(out)) out += '^';
    out += rawText(k);
  }
  return out;
}

function text(node: XNode | undefined): string {
  return rawText(node).replace(/\s+/g, ' ').trim();
}

function year(article: XNode | undefined, medline: XNode | undefined, pubmedData: XNode | undefined): number | null {
  const toYear = (s: string): number | null => {
    const m = /\b(1[89]\d\d|2\d\d\d)\b/.exec(s);
    return m ? Number(m[1]) : null;
  };
  const pubDate = at(article, 'Journal', 'JournalIssue', 'PubDate');
  // MedlineDate holds ranges and seasons: "2019 Nov-Dec", "Winter 2018".
  const candidates = [
    text(at(pubDate, 'Year')),
    text(at(pubDate, 'MedlineDate')),
    text(at(article, 'ArticleDate', 'Year')),
    ...all(kids(at(pubmedData, 'History')), 'PubMedPubDate')
      .filter((d) => attr(d, 'PubStatus') === 'pubmed')
      .map((d) => text(at(d, 'Year'))),
    text(at(medline, 'DateCompleted', 'Year')),
  ];
  for (const c of candidates) {
    const y = c ? toYear(c) : null;
    if (y !== null) return y;
  }
  return null;
}

function authors(list: XNode | undefined): string[] {
  const out: string[] = [];
  for (const a of all(kids(list), 'Author')) {
    if (attr(a, 'ValidYN') === 'N') continue;
    const collective = text(at(a, 'CollectiveName'));
    if (collective) {
      out.push(collective);
      continue;
    }
    const last = text(at(a, 'LastName'));
    // PubMed's own citation form: "McMurray JJV".
    const initials = text(at(a, 'Initials')) || text(at(a, 'ForeName'));
    if (last) out.push(initials ? `${last} ${initials}` : last);
  }
  return out;
}

/** Structured abstracts keep their section labels: "BACKGROUND: …", one section per line. */
function abstract(node: XNode | undefined): string {
  return all(kids(node), 'AbstractText')
    .map((p) => {
      const body = text(p);
      const label = attr(p, 'Label')?.trim();
      return label && label.toUpperCase() !== 'UNLABELLED' ? `${label}: ${body}` : body;
    })
    .filter((s) => s !== '')
    .join('\n');
}

function journalArticle(node: XNode): CorpusDoc | undefined {
  const medline = at(node, 'MedlineCitation');
  const article = at(medline, 'Article');
  const pmid = text(at(medline, 'PMID'));
  if (!pmid) return undefined;
  const journal = at(article, 'Journal');
  return {
    paperId: pmid,
    title: text(at(article, 'ArticleTitle')) || text(at(article, 'VernacularTitle')),
    authors: authors(at(article, 'AuthorList')),
    abstract: abstract(at(article, 'Abstract')),
    year: year(article, medline, at(node, 'PubmedData')),
    venue: text(at(journal, 'Title')) || text(at(journal, 'ISOAbbreviation')),
  };
}

/** Book chapters (NCBI Bookshelf: StatPearls, GeneReviews) come as PubmedBookArticle. */
function bookArticle(node: XNode): CorpusDoc | undefined {
  const doc = at(node, 'BookDocument');
  const pmid = text(at(doc, 'PMID'));
  if (!pmid) return undefined;
  const book = at(doc, 'Book');
  const y = text(at(book, 'PubDate', 'Year')) || text(at(doc, 'ContributionDate', 'Year'));
  return {
    paperId: pmid,
    title: text(at(doc, 'ArticleTitle')) || text(at(book, 'BookTitle')),
    authors: authors(at(doc, 'AuthorList') ?? at(book, 'AuthorList')),
    abstract: abstract(at(doc, 'Abstract')),
    year: /^\d{4}$/.test(y) ? Number(y) : null,
    venue: text(at(book, 'BookTitle')),
  };
}

/**
 * Parses an efetch body. Throws PubmedXmlError when the body is not valid XML (`malformed`)
 * or is NCBI's error document (`<eFetchResult><ERROR>…`).
 */
export function parsePubmedXml(xml: string): CorpusDoc[] {
  const valid = XMLValidator.validate(xml);
  if (valid !== true) {
    throw new PubmedXmlError(`NCBI sent a body that is not valid XML (${valid.err.msg}, line ${valid.err.line})`, true);
  }
  const roots = parser.parse(xml) as XNode[];
  const root = roots.find((n) => {
    const t = tagOf(n);
    return t !== undefined && !t.startsWith('?') && t !== '#text' && t !== '!DOCTYPE';
  });
  const rootTag = root ? tagOf(root) : undefined;
  if (!root || rootTag !== 'PubmedArticleSet') {
    const err = text(first(kids(root), 'ERROR')) || (rootTag === 'ERROR' ? text(root) : '');
    if (err) throw new PubmedXmlError(`NCBI: ${err}`, false);
    throw new PubmedXmlError(`NCBI sent <${rootTag ?? 'nothing'}> where a PubmedArticleSet was expected`, true);
  }
  const docs: CorpusDoc[] = [];
  for (const n of kids(root)) {
    const tag = tagOf(n);
    const doc = tag === 'PubmedArticle' ? journalArticle(n) : tag === 'PubmedBookArticle' ? bookArticle(n) : undefined;
    if (doc) docs.push(doc);
  }
  return docs;
}
