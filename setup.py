"""Packaging for gtmcluster: the package, the `gtmcluster` command and the twistd plugin `gtm`."""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="gtmcluster",
    version="0.1.0.dev0",
    description="Global traffic manager (GSLB): authoritative DNS, probing and a TLS sync group, on Twisted",
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.11",
    packages=[*find_packages(include=["gtmcluster", "gtmcluster.*"]), "twisted.plugins"],
    # twistd only finds plugins in a twisted/plugins folder that is not a package
    # (no __init__.py); setuptools warns about that, which is expected.
    package_dir={"twisted.plugins": "twistd-plugins/twisted/plugins"},
    package_data={"gtmcluster": ["py.typed", "api/static/*.html", "api/static/*.js", "rum/snippet.js"]},
    install_requires=[
        "twisted[tls]>=24.7",
        "pyopenssl>=24",
        "service-identity>=24",
        "pyyaml>=6",
        # certificates for the sync group (not_valid_after_utc and friends arrived in 42)
        "cryptography>=42",
        # GET /metrics in Prometheus's format (exposition done right, from a custom collector)
        "prometheus_client>=0.17",
        # master-file (zone) syntax and RDATA text forms of every record type
        "dnspython>=2.6",
        # a link's traffic from its router's interface counters (SNMP v2c ifHCIn/OutOctets)
        "pysnmp>=7,<8",
        # GeoIP topology: country, continent and ASN of a client from MaxMind DB (.mmdb) files
        "maxminddb>=2.2",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            # make test runs the suite in parallel workers (most process tests wait on timers)
            "pytest-xdist>=3.5",
            "hypothesis>=6.100",
            "mypy>=1.10",
            "mypy-zope",  # Twisted's zope.interface types (as Twisted itself checks them)
            "ruff>=0.5",
            "types-PyYAML",
            # coverage-guided fuzzing (libFuzzer for Python) of the parsers in fuzz/;
            # make test runs each target briefly, make fuzz longer
            "atheris>=2.3",
            "types-atheris",  # its type stubs (fuzz/ is type-checked too)
            "mmdb-writer",  # the GeoIP tests write their own small .mmdb databases
            # make lint checks the layers of docs/architecture.md and that no import closes a
            # circle (the contracts in pyproject.toml; imports under TYPE_CHECKING count)
            "import-linter>=2.1",
            # the API's OpenAPI description checked against a live node: every route asked
            # with generated input by each role, no 500 and no answer the description does not
            # allow (tests/process/test_api_openapi.py)
            "schemathesis>=4.0,<5",
        ],
    },
    entry_points={"console_scripts": ["gtmcluster = gtmcluster.cli.main:main"]},
    classifiers=[
        "Framework :: Twisted",
        "Programming Language :: Python :: 3",
        "Topic :: Internet :: Name Service (DNS)",
    ],
)
