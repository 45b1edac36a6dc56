import { DRIVERS } from "../support/drivers.ts";
import { describeLeaseContract } from "./lease-contract.ts";

for (const factory of DRIVERS) describeLeaseContract(factory);
