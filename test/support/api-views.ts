/**
 * The runtime's HTTP API views as the tests read them: the contract itself
 * (runtimes/http/contract.ts), declared once for the app, the client, the dashboard and the tests.
 */
export type * from "../../runtimes/http/contract.ts";
