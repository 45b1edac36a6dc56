import { describeLeaseContract } from "../leases/lease-contract.ts";
import { freshObjectDriver } from "./support.ts";

// The lease protocol contract every store passes, here on Durable Object SQLite inside workerd.
describeLeaseContract({ name: "do-sqlite", open: () => Promise.resolve(freshObjectDriver()) });
