#!/usr/bin/env python3
"""A browser for tests/web.rs: Debian's chromium, headless, driven through chromium-driver
(WebDriver) with Debian's python3-selenium. One JSON command per line on stdin, one JSON
answer per line on stdout ({"ok": true, ...} or {"ok": false, "error": "..."}).

Commands: get(url); wait(css, timeout, [text], [attr, above]) until an element matches (its
text containing `text`, or its attribute `attr` a number above `above`); texts(css);
attrs(css, name); click(css); type(css, text); select(css, value); shot(path); js(script);
quit."""
import json
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select


def start():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1500,1000",
              "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def matches(e, c):
    if "text" in c and c["text"] not in e.text:
        return False
    if "attr" in c:
        v = e.get_attribute(c["attr"])
        try:
            return v is not None and float(v) > float(c.get("above", 0))
        except ValueError:
            return False
    return True


def wait(d, c):
    until = time.time() + float(c.get("timeout", 10))
    last = []
    while time.time() < until:
        try:
            es = d.find_elements(By.CSS_SELECTOR, c["css"])
            last = [(e.text, e.get_attribute(c["attr"]) if "attr" in c else None) for e in es]
            for e in es:
                if matches(e, c):
                    return {"ok": True, "text": e.text}
        except StaleElementReferenceException:
            # The page re-rendered between finding an element and reading it: look again.
            pass
        time.sleep(0.1)
    return {"ok": False, "error": "timed out waiting for %s; found %r" % (json.dumps(c), last[:8])}


def settled(d, css, read):
    """`read` of every element `css` finds, read between two of the page's re-renders
    (it redraws parts every second: an element found may be gone when it is read)."""
    for _ in range(50):
        try:
            return [read(e) for e in d.find_elements(By.CSS_SELECTOR, css)]
        except StaleElementReferenceException:
            time.sleep(0.05)
    return [read(e) for e in d.find_elements(By.CSS_SELECTOR, css)]


def run(d, c):
    op = c["op"]
    if op == "get":
        d.get(c["url"])
        return {"ok": True, "url": d.current_url, "title": d.title}
    if op == "wait":
        return wait(d, c)
    if op == "texts":
        return {"ok": True, "texts": settled(d, c["css"], lambda e: e.text)}
    if op == "attrs":
        return {"ok": True, "values": settled(d, c["css"], lambda e: e.get_attribute(c["name"]))}
    if op == "click":
        for _ in range(50):
            e = d.find_element(By.CSS_SELECTOR, c["css"])
            try:
                e.click()
                return {"ok": True}
            except StaleElementReferenceException:
                # The page redrew it between finding and clicking: find it again.
                time.sleep(0.05)
                continue
            except Exception:
                pass
            try:
                # An SVG group that WebDriver finds not interactable: the same event from script.
                d.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", e)
                return {"ok": True}
            except StaleElementReferenceException:
                time.sleep(0.05)
        return {"ok": False, "error": "%s kept being redrawn before it could be clicked" % c["css"]}
    if op == "type":
        e = d.find_element(By.CSS_SELECTOR, c["css"])
        e.clear()
        e.send_keys(c["text"])
        return {"ok": True}
    if op == "select":
        Select(d.find_element(By.CSS_SELECTOR, c["css"])).select_by_value(c["value"])
        return {"ok": True}
    if op == "shot":
        return {"ok": d.save_screenshot(c["path"])}
    if op == "js":
        return {"ok": True, "value": d.execute_script(c["script"])}
    return {"ok": False, "error": "unknown op " + op}


def main():
    d = start()
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    try:
        for line in sys.stdin:
            c = json.loads(line)
            if c["op"] == "quit":
                break
            try:
                a = run(d, c)
            except Exception as e:  # the test reads the reason
                a = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
            print(json.dumps(a), flush=True)
    finally:
        d.quit()


if __name__ == "__main__":
    main()
