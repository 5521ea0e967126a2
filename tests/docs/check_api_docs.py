"""Builds the API reference with Doxygen and checks it: Doxygen's own
warnings fail (WARN_AS_ERROR in docs/Doxyfile.in), every public concept of
include/ft has a description, and the five policy concepts and the Trainer
each show code from the examples the test suite compiles.

usage: check_api_docs.py DOXYGEN DOXYFILE OUTPUT_DIR
"""
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

WITH_EXAMPLE = ["ft::model_family", "ft::precision_policy", "ft::parallelism_policy", "ft::optimizer_policy",
                "ft::adapter_policy", "ft::Trainer"]


def described(compound):
    text = "".join("".join(compound.find(tag).itertext()) for tag in ("briefdescription", "detaileddescription")
                   if compound.find(tag) is not None)
    return text.strip() != ""


def main():
    doxygen, doxyfile, output = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    run = subprocess.run([doxygen, doxyfile], capture_output=True, text=True)
    warnings = output / "warnings.log"
    if run.returncode != 0:
        print(run.stdout + run.stderr)
        if warnings.exists():
            print(warnings.read_text())
        sys.exit("doxygen failed: its warnings are above")
    index = ET.parse(output / "xml" / "index.xml").getroot()
    pages = {c.findtext("name"): c.get("refid") for c in index.iter("compound")
             if c.get("kind") in ("concept", "class")}
    concepts = [c.findtext("name") for c in index.iter("compound") if c.get("kind") == "concept"]
    problems = []
    for name in concepts + ["ft::Trainer"]:
        if "detail" in name.split("::"):
            continue
        if name not in pages:
            problems.append(f"{name}: not in the reference")
            continue
        compound = ET.parse(output / "xml" / (pages[name] + ".xml")).getroot().find("compounddef")
        if not described(compound):
            problems.append(f"{name}: not documented (a /// comment above it says what it asks of a type)")
        elif name in WITH_EXAMPLE and compound.find(".//programlisting") is None:
            problems.append(f"{name}: shows no example (an @snippet from examples/)")
    for p in problems:
        print(p)
    if problems:
        sys.exit(f"{len(problems)} problem(s) in the API reference")
    print(f"API reference: {len(concepts)} concepts and the Trainer documented; "
          f"html in {output / 'html' / 'index.html'}")


if __name__ == "__main__":
    main()
