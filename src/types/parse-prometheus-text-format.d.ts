/** Types for parse-prometheus-text-format 1.1 (the package ships none): prom2json-shaped output. */
declare module 'parse-prometheus-text-format' {
  export interface ParsedSample {
    /** The sample value as written (`1.0`, `NaN`, `+Inf`, ...); absent for histogram/summary rows. */
    value?: string;
    labels?: Record<string, string>;
    timestamp_ms?: string;
  }
  export interface ParsedFamily {
    name: string;
    help: string;
    type: string;
    metrics: ParsedSample[];
  }
  /** Throws on a malformed line. */
  export default function parsePrometheusTextFormat(text: string): ParsedFamily[];
}
