#!/usr/bin/env python3
"""Append a CycloneDX vulnerabilities section to the cyclonedx-npm SBOM of
inputs/npm-vulnerable (lodash 4.17.20, minimist 1.2.5).

No scanner that runs offline here emits vulnerabilities (npm audit's bulk
endpoint is not reachable), so the three entries below are copied by hand
from the public advisories: GHSA-35jh-r3h4-6jhm, GHSA-29mw-wpgm-hmr9 and
GHSA-xvch-5gv4-984h. The components, purls and bom-refs are the tool's.

usage: add_vulnerabilities.py IN.json OUT.json
"""
import json
import sys

src, dst = sys.argv[1], sys.argv[2]
bom = json.load(open(src))
refs = {c["name"]: c["bom-ref"] for c in bom["components"]}
nvd = {"name": "NVD", "url": "https://nvd.nist.gov/"}
ghsa = {"name": "GitHub Advisories", "url": "https://github.com/advisories"}
bom["vulnerabilities"] = [
    {
        "bom-ref": "vuln-lodash-template",
        "id": "CVE-2021-23337",
        "source": nvd,
        "references": [{"id": "GHSA-35jh-r3h4-6jhm", "source": ghsa}],
        "ratings": [
            {"source": nvd, "score": 7.2, "severity": "high", "method": "CVSSv31",
             "vector": "CVSS:3.1/AV:N/AC:L/PR:H/UI:N/S:U/C:H/I:H/A:H"},
            {"source": ghsa, "severity": "high"},
        ],
        "cwes": [94],
        "description": "Command Injection in lodash",
        "detail": "Lodash versions prior to 4.17.21 are vulnerable to Command Injection via the template function.",
        "affects": [{"ref": refs["lodash"], "versions": [{"range": "vers:npm/<4.17.21", "status": "affected"}]}],
    },
    {
        "bom-ref": "vuln-lodash-redos",
        "id": "CVE-2020-28500",
        "source": nvd,
        "references": [{"id": "GHSA-29mw-wpgm-hmr9", "source": ghsa}],
        "ratings": [
            {"source": nvd, "score": 5.3, "severity": "medium", "method": "CVSSv31",
             "vector": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:L"},
        ],
        "cwes": [1333],
        "description": "Regular Expression Denial of Service (ReDoS) in lodash",
        "detail": "Lodash versions prior to 4.17.21 are vulnerable to ReDoS via the toNumber, trim and trimEnd functions.",
        "affects": [{"ref": refs["lodash"], "versions": [{"range": "vers:npm/<4.17.21", "status": "affected"}]}],
    },
    {
        "bom-ref": "vuln-minimist-proto",
        "id": "CVE-2021-44906",
        "source": nvd,
        "references": [{"id": "GHSA-xvch-5gv4-984h", "source": ghsa}],
        "ratings": [
            {"source": ghsa, "severity": "critical"},
            {"source": nvd, "score": 9.8, "severity": "critical", "method": "CVSSv31",
             "vector": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"},
        ],
        "cwes": [1321],
        "description": "Prototype Pollution in minimist",
        "detail": "Minimist versions prior to 1.2.6 are vulnerable to Prototype Pollution via setKey() in index.js.",
        "affects": [{"ref": refs["minimist"], "versions": [{"range": "vers:npm/<1.2.6", "status": "affected"}]}],
    },
]
json.dump(bom, open(dst, "w"), indent=2)
open(dst, "a").write("\n")
