/**
 * A short streamed chat request through Envoy naming a request objective (the endpoint picker's
 * `x-gateway-inference-objective`; none when undefined), for the admission tests.
 */
export function objectiveChat(
  baseUrl: string,
  objective: string | undefined,
  signal?: AbortSignal,
): Promise<Response> {
  return fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(objective === undefined ? {} : { 'x-gateway-inference-objective': objective }),
    },
    body: JSON.stringify({
      model: 'sim-model',
      messages: [{ role: 'user', content: 'Summarise the report.' }],
      max_tokens: 3,
      stream: true,
    }),
    ...(signal ? { signal } : {}),
  });
}
