/** Command lines of `qlr` that tests and benches start the same way. */

/**
 * `qlr serve` on an ephemeral port (it prints the URL it serves) over `stateDir`, applying the
 * package at `manifestPath` at start; the profile is the CLI's default unless named.
 */
export function serveArgs(
  stateDir: string,
  manifestPath: string,
  options: { readonly profile?: string; readonly extra?: readonly string[] } = {},
): string[] {
  return [
    "serve",
    ...(options.profile === undefined ? [] : ["--profile", options.profile]),
    "--state-dir",
    stateDir,
    "--port",
    "0",
    "--apply",
    manifestPath,
    ...(options.extra ?? []),
  ];
}

/** `qlr worker` leasing attempts of `pool` from the coordinator at `coordinatorUrl`, `capacity` at a time. */
export function workerArgs(
  coordinatorUrl: string,
  stateDir: string,
  options: { readonly pool?: string; readonly capacity: number },
): string[] {
  return [
    "worker",
    "--coordinator",
    coordinatorUrl,
    "--pool",
    options.pool ?? "p1",
    "--capacity",
    String(options.capacity),
    "--state-dir",
    stateDir,
  ];
}
