import { describeLeaseContract } from "../leases/lease-contract.ts";
import { DO_SQLITE } from "./support.ts";

// The lease protocol contract every store passes, here on Durable Object SQLite inside workerd.
describeLeaseContract(DO_SQLITE);
