"""Generate the seeded extraction corpus the bundled demo models are trained and evaluated on.

Each record pairs a short source text (an invoice, a contact card, an event notice, ...) with a
JSON Schema and the gold JSON answer, rendered in the product's prompt format
(:mod:`structspec.models.prompt`). Gold values are mostly copied from the text; dates are
normalised to ISO 8601, amounts and counts become JSON numbers, currency symbols become codes.

The held-out split never shares a template with the training split: every field has labels and
sentence phrasings reserved for it, it uses its own document layouts, and one domain (job posts)
appears only there. Every record lists the template ids it used so this can be checked.

    python tools/make_extraction_corpus.py --out /tmp/demo/corpus --train 60000 --heldout 600 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from structspec.models.prompt import extraction_messages, render_answer, render_prompt

FIRST = ["José", "Zoë", "Łukasz", "Søren", "Ana", "Chen", "Yuki", "Amélie", "Björn", "Ngozi", "Priya", "Mateo",
         "Olga", "Fatima", "İbrahim", "Hana", "François", "Anna", "Tom", "Sarah", "David", "Maria", "Kenji", "Aiyana",
         "Oskar", "Lucía", "Noah", "Emma", "Raj", "Chloé", "Mikael", "Ingrid", "Jürgen", "Siobhán", "Dmitri",
         "Ana Sofía", "Kwame", "Leila", "Pablo", "Agnieszka", "Thảo", "Åsa", "Mei", "Omar", "Grace", "Hugo", "Elif",
         "Jonas"]
LAST = ["Müller", "García", "Núñez", "O'Brien", "Kowalski", "Tanaka", "Okafor", "Nguyễn", "Åberg", "Smith", "Rossi",
        "Dubois", "Papadopoulos", "Øster", "Brontë", "Johnson", "Schäfer", "Fernández", "Ivanova", "Lee", "Patel",
        "Martin", "Yılmaz", "Kim", "Dvořák", "Novak", "Haddad", "Wójcik", "Costa", "Lindqvist", "Mbeki", "Sato", "Weiß"]
CJK_NAMES = ["田中 太郎", "山本 花子", "王 芳", "李 伟", "김 민준", "佐藤 健"]
COMPANIES = ["Acme Corp", "Nordlicht GmbH", "Café Olé Ltd", "Blue River Inc", "Kōbō Studio", "Zenith Labs",
             "Bäckerei Schmidt", "Fjord & Sons", "Polar Byte AS", "Atelier Rivière", "Quantum Leaf LLC",
             "Sakura Trading Co", "Orbit Logistics", "Greenfield Farms", "Lumière SARL", "Ostrava Steel a.s.",
             "Red Kite Media", "Copper Pine Ltd", "Helios Energía", "Vega Robotics", "Maple & Oak", "Straße 9 GmbH"]
CITIES = [("München", "Germany", "80331"), ("São Paulo", "Brazil", "01310-100"), ("Zürich", "Switzerland", "8001"),
          ("Kraków", "Poland", "31-042"), ("Reykjavík", "Iceland", "101"), ("Lyon", "France", "69002"),
          ("Toronto", "Canada", "M5V 2T6"), ("Austin", "USA", "78701"), ("Osaka", "Japan", "530-0001"),
          ("Nairobi", "Kenya", "00100"), ("Malmö", "Sweden", "211 20"), ("Bogotá", "Colombia", "110111"),
          ("Leeds", "United Kingdom", "LS1 4AP"), ("Porto", "Portugal", "4000-322"), ("Gdańsk", "Poland", "80-001"),
          ("Seattle", "USA", "98101"), ("Dublin", "Ireland", "D02 X285"), ("Århus", "Denmark", "8000")]
STREETS = ["Hauptstraße", "Rua Augusta", "Bahnhofstrasse", "ul. Floriańska", "Laugavegur", "Rue de la République",
           "King Street West", "Congress Avenue", "Midosuji", "Kenyatta Avenue", "Södergatan", "Carrera 7",
           "Briggate", "Rua das Flores", "Długa", "Pine Street", "Grafton Street", "Åboulevarden"]
PRODUCTS = ["wireless mouse", "standing desk", "espresso grinder", "noise-cancelling headphones", "yoga mat",
            "mechanical keyboard", "LED desk lamp", "cast iron skillet", "hiking backpack", "smart thermostat",
            "USB-C hub", "ceramic teapot", "trail running shoes", "4K monitor", "electric kettle", "wool blanket"]
BRANDS = ["Nordik", "Lumo", "Kaffa", "Ergotek", "Sonique", "Pinecrest", "Hōseki", "Vélo", "Brightly", "Alpenrot"]
CATEGORIES = ["electronics", "furniture", "kitchen", "sports", "home", "office", "outdoor", "audio"]
EVENTS = ["Product launch", "Quarterly review", "Team offsite", "Charity gala", "Developer meetup", "Board meeting",
          "Wine tasting", "Book club", "Hackathon", "Spring concert", "Yoga workshop", "Annual general meeting"]
VENUES = ["Grand Hall", "Room 4B", "Café Central", "Hotel Adlon", "the Old Library", "Pier 39 Pavilion",
          "Conference Center North", "Studio Ōtemachi", "Gallery Nørrebro", "Main Auditorium"]
ISSUES = ["cannot log in after password reset", "invoice shows the wrong amount", "app crashes on startup",
          "package arrived damaged", "refund not received", "two-factor code never arrives", "export to CSV fails",
          "screen flickers after update", "charged twice for one order", "cannot change delivery address"]
JOBS = ["Data Engineer", "Backend Developer", "UX Designer", "Product Manager", "Sales Associate", "Nurse",
        "Accountant", "Warehouse Lead", "Marketing Specialist", "Site Reliability Engineer", "Barista", "Translator"]
SKILLS = ["Python", "SQL", "Figma", "Excel", "Kubernetes", "German", "Spanish", "Go", "customer service", "React"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
CURRENCIES = [("USD", "$"), ("EUR", "€"), ("GBP", "£"), ("JPY", "¥"), ("CHF", "CHF"), ("SEK", "kr")]
NOISE = ["Thank you for your business!", "Please keep this for your records.", "Page 1 of 1", "CONFIDENTIAL",
         "-- forwarded message --", "Sent from my phone", "Questions? Reply to this message.", "*** ***",
         "Ref. 000{n}", "Printed by system user {n}", "Our office hours are 9-17, Monday to Friday.", "#{n}",
         "This message was generated automatically.", "Have a great day :)", "v{n}.2", "Terms apply."]

Value = tuple[Any, str]
"""A gold JSON value and the way the source text spells it."""


def ascii_fold(text: str) -> str:
    """Letters of ``text`` without accents, lower-cased, for e-mail addresses."""
    text = text.replace("ø", "o").replace("Ø", "O").replace("ł", "l").replace("ß", "ss")
    folded = unicodedata.normalize("NFKD", text)
    return "".join(c for c in folded if c.isascii() and (c.isalnum() or c in ".-")).lower()


ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "sz", "ž", "ł", "br", "tr"]
VOWELS = ["a", "e", "i", "o", "u", "é", "ö", "å", "ü", "ai", "ã", "y"]


def made_up_word(rng: random.Random) -> str:
    """A capitalised pronounceable non-word, so values must be copied rather than remembered."""
    return "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(rng.randint(1, 3))).capitalize()


def person(rng: random.Random) -> Value:
    roll = rng.random()
    if roll < 0.06:
        name = rng.choice(CJK_NAMES)
    elif roll < 0.5:
        name = f"{made_up_word(rng)} {made_up_word(rng)}"
    else:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    return name, name


def email_for(rng: random.Random, name: str) -> Value:
    parts = [ascii_fold(p) for p in name.split()] or ["info"]
    parts = [p for p in parts if p] or [f"user{rng.randint(1, 99)}"]
    local = rng.choice([".".join(parts), parts[0], parts[0][:1] + parts[-1], f"{parts[-1]}{rng.randint(1, 99)}"])
    domain = rng.choice(["example.com", "mail.test", "corp.example", "post.example.org", "firma.example.de"])
    address = f"{local}@{domain}"
    return address, address


def email(rng: random.Random) -> Value:
    return email_for(rng, person(rng)[0])


def phone(rng: random.Random) -> Value:
    d = [str(rng.randint(0, 9)) for _ in range(10)]
    text = rng.choice([
        f"+1 ({''.join(d[:3])}) {''.join(d[3:6])}-{''.join(d[6:])}",
        f"+49 {''.join(d[:3])} {''.join(d[3:])}",
        f"{''.join(d[:3])}-{''.join(d[3:6])}-{''.join(d[6:])}",
        f"+44 {''.join(d[:4])} {''.join(d[4:])}",
        f"0{''.join(d[:2])} {''.join(d[2:5])} {''.join(d[5:9])}",
    ])
    return text, text


def date(rng: random.Random) -> Value:
    year, month, day = rng.randint(2019, 2027), rng.randint(1, 12), rng.randint(1, 28)
    gold = f"{year:04d}-{month:02d}-{day:02d}"
    name = MONTHS[month - 1]
    text = rng.choice([
        gold,
        f"{month:02d}/{day:02d}/{year}",
        f"{day} {name} {year}",
        f"{name} {day}, {year}",
        f"{name[:3]} {day}, {year}",
        f"{day:02d}.{month:02d}.{year}",
        f"{day} {name[:3]} {year}",
    ])
    return gold, text


def clock(rng: random.Random) -> Value:
    hour, minute = rng.randint(7, 21), rng.choice([0, 15, 30, 45])
    gold = f"{hour:02d}:{minute:02d}"
    text = rng.choice([gold, f"{(hour - 1) % 12 + 1}:{minute:02d} {'PM' if hour >= 12 else 'AM'}"])
    return gold, text


def money_text(rng: random.Random, cents: int, code: str, symbol: str) -> str:
    whole, frac = divmod(cents, 100)
    plain = f"{whole}.{frac:02d}"
    grouped = f"{whole:,}.{frac:02d}"
    european = f"{whole:,}".replace(",", ".") + f",{frac:02d}"
    if code == "JPY":
        return rng.choice([f"¥{whole:,}", f"{whole} JPY", f"JPY {whole:,}"])
    return rng.choice([
        f"{symbol}{grouped}" if len(symbol) == 1 else f"{symbol} {grouped}",
        f"{plain} {code}",
        f"{code} {grouped}",
        f"{european} {symbol}" if code in ("EUR", "SEK") else f"{symbol}{plain}",
    ])


def number_value(cents: int, code: str) -> int | float:
    if code == "JPY" or cents % 100 == 0:
        return cents // 100
    return cents / 100


def money_pair(rng: random.Random, low: int, high: int) -> tuple[Value, Value]:
    """An amount and its currency code, spelled together in the text."""
    code, symbol = rng.choice(CURRENCIES)
    cents = rng.randint(low, high) * (100 if code == "JPY" else 1)
    if code == "JPY" or rng.random() < 0.3:
        cents = cents // 100 * 100
    text = money_text(rng, cents, code, symbol)
    return (number_value(cents, code), text), (code, text)


def integer(low: int, high: int, units: tuple[str, ...] = ("",)) -> Callable[[random.Random], Value]:
    def make(rng: random.Random) -> Value:
        n = rng.randint(low, high)
        unit = rng.choice(units)
        return n, f"{n}{unit}"

    return make


def code(prefix_choices: tuple[str, ...], digits: int) -> Callable[[random.Random], Value]:
    def make(rng: random.Random) -> Value:
        value = rng.choice(prefix_choices) + "".join(str(rng.randint(0, 9)) for _ in range(digits))
        return value, value

    return make


def pick(options: list[str], invented: float = 0.0) -> Callable[[random.Random], Value]:
    """A value from ``options``, or with probability ``invented`` a made-up word in its style."""
    def make(rng: random.Random) -> Value:
        if rng.random() < invented:
            word = made_up_word(rng)
            value = f"{word} {rng.choice(options).split()[-1]}" if rng.random() < 0.5 else word
        else:
            value = rng.choice(options)
        return value, value

    return make


def enum(options: dict[str, list[str]]) -> Callable[[random.Random], Value]:
    """A value from ``options`` keys, spelled as one of its listed surface forms."""
    def make(rng: random.Random) -> Value:
        value = rng.choice(list(options))
        return value, rng.choice(options[value])

    return make


def boolean(yes: list[str], no: list[str]) -> Callable[[random.Random], Value]:
    def make(rng: random.Random) -> Value:
        flag = rng.random() < 0.5
        return flag, rng.choice(yes if flag else no)

    return make


def string_list(pool: list[str]) -> Callable[[random.Random], Value]:
    def make(rng: random.Random) -> Value:
        items = rng.sample(pool, rng.randint(1, 3))
        return items, rng.choice([", ", " and ", " / "]).join(items)

    return make


@dataclass(frozen=True)
class Field:
    """One schema property: its JSON Schema, a value maker, labels and sentence phrasings.

    The last label and the last phrasing are reserved for the held-out split.
    """

    key: str
    schema: dict[str, Any]
    labels: tuple[str, ...]
    phrases: tuple[str, ...]
    make: Callable[[random.Random], Value] | None = None


STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
DATE = {"type": "string", "format": "date"}
CUR = {"type": "string", "enum": [c for c, _ in CURRENCIES]}
STRS = {"type": "array", "items": {"type": "string"}}


def f(key: str, schema: dict[str, Any], labels: str, phrases: str, make: Callable[[random.Random], Value] | None = None
      ) -> Field:
    """Shorthand: labels and phrasings are ``|``-separated."""
    return Field(key, schema, tuple(labels.split("|")), tuple(phrases.split("|")), make)


@dataclass(frozen=True)
class Domain:
    """A kind of document: its fields, headers and closing lines (last of each held out)."""

    name: str
    fields: tuple[Field, ...]
    headers: str
    """Document titles, ``|``-separated."""
    linked: Callable[[random.Random], dict[str, Value]]
    """Makes values that must agree with each other (an amount and its currency, a name and its e-mail)."""


def _money_fields(amount_key: str, currency_key: str, low: int, high: int
                  ) -> Callable[[random.Random], dict[str, Value]]:
    def make(rng: random.Random) -> dict[str, Value]:
        amount, currency = money_pair(rng, low, high)
        return {amount_key: amount, currency_key: currency}

    return make


def _person_fields(name_key: str, email_key: str) -> Callable[[random.Random], dict[str, Value]]:
    def make(rng: random.Random) -> dict[str, Value]:
        name = person(rng)
        return {name_key: name, email_key: email_for(rng, name[0])}

    return make


def _both(*makers: Callable[[random.Random], dict[str, Value]]) -> Callable[[random.Random], dict[str, Value]]:
    def make(rng: random.Random) -> dict[str, Value]:
        out: dict[str, Value] = {}
        for m in makers:
            out.update(m(rng))
        return out

    return make


def _city_fields(city_key: str, country_key: str, postal_key: str | None = None
                 ) -> Callable[[random.Random], dict[str, Value]]:
    def make(rng: random.Random) -> dict[str, Value]:
        city, country, postal = rng.choice(CITIES)
        out = {city_key: (city, city), country_key: (country, country)}
        if postal_key:
            out[postal_key] = (postal, postal)
        return out

    return make


PRIORITY = enum({"low": ["low", "Low", "P3"], "medium": ["medium", "Medium", "P2", "normal"],
                 "high": ["high", "High", "P1"], "urgent": ["urgent", "URGENT", "P0", "critical"]})
STATUS = enum({"open": ["open", "Open", "new"], "pending": ["pending", "waiting on customer"],
               "closed": ["closed", "resolved", "Closed"]})
ORDER_STATUS = enum({"processing": ["processing", "being prepared"], "shipped": ["shipped", "on its way", "dispatched"],
                     "delivered": ["delivered", "Delivered"], "cancelled": ["cancelled", "canceled"]})

DOMAINS: tuple[Domain, ...] = (
    Domain("invoice", (
        f("invoice_number", STR, "Invoice number|Invoice #|Inv. no.|Invoice ID|Bill no.",
          "This is invoice {v}.|Invoice {v} is attached.|Please find invoice {v} below.|Reference invoice {v}.|"
          "Our bill {v} follows.", code(("INV-", "INV-2024-", "F", "#"), 5)),
        f("vendor", STR, "Vendor|From|Seller|Supplier|Issued by",
          "It was issued by {v}.|{v} sent this invoice.|Billed by {v}.|Seller: {v}.|The supplier is {v}.",
          pick(COMPANIES, 0.5)),
        f("customer", STR, "Bill to|Customer|Client|Billed to|Sold to",
          "The customer is {v}.|Billed to {v}.|This invoice is for {v}.|Client name: {v}.|Sold to {v}."),
        f("customer_email", {"type": "string", "format": "email"}, "Email|E-mail|Contact email|Mail|Reach at",
          "Send questions to {v}.|Contact: {v}.|Their email is {v}.|Mail {v} for copies.|Write to {v}."),
        f("issue_date", DATE, "Date|Invoice date|Issued|Issue date|Dated",
          "Issued on {v}.|The invoice date is {v}.|Dated {v}.|Invoice created {v}.|It is dated {v}.", date),
        f("due_date", DATE, "Due date|Due|Payment due|Pay by|Deadline",
          "Payment is due {v}.|Please pay by {v}.|Due on {v}.|The due date is {v}.|Settle it before {v}.", date),
        f("total", NUM, "Total|Amount due|Total due|Grand total|Balance",
          "The total is {v}.|Amount due: {v}.|Please pay {v}.|You owe {v}.|The balance comes to {v}."),
        f("currency", CUR, "", ""),
    ), "INVOICE|Tax invoice|Invoice|Billing statement|Commercial invoice",
        _both(_money_fields("total", "currency", 500, 900000), _person_fields("customer", "customer_email"))),
    Domain("contact", (
        f("name", STR, "Name|Full name|Contact|Person|Attendee name",
          "My name is {v}.|This is {v}.|{v} here.|You can call me {v}.|Signed, {v}."),
        f("email", {"type": "string", "format": "email"}, "Email|E-mail|Mail|Email address|Electronic mail",
          "Email me at {v}.|My address is {v}.|Reach me via {v}.|Write to {v}.|Drop a line to {v}."),
        f("phone", STR, "Phone|Tel|Mobile|Cell|Telephone",
          "Call me on {v}.|My number is {v}.|Phone {v}.|Text {v} anytime.|Ring {v}.", phone),
        f("company", STR, "Company|Organization|Employer|Firm|Works at",
          "I work at {v}.|I am with {v}.|Employed by {v}.|I represent {v}.|Currently at {v}.", pick(COMPANIES, 0.5)),
        f("city", STR, "City|Location|Based in|Town|Lives in",
          "I live in {v}.|Based in {v}.|I am located in {v}.|Home is {v}.|I reside in {v}."),
        f("country", STR, "Country|Nation|Country of residence|Land|Home country",
          "That is in {v}.|Country: {v}.|I'm from {v}.|My country is {v}.|Living in {v}."),
        f("age", INT, "Age|Years|Age (years)|Aged|Years old",
          "I am {v} years old.|Age {v}.|I'm {v}.|Aged {v}.|I turned {v} this year.", integer(18, 90)),
    ), "Contact card|New contact|Contact details|vCard|Address book entry",
        _both(_person_fields("name", "email"), _city_fields("city", "country"))),
    Domain("event", (
        f("title", STR, "Event|Title|What|Occasion|Happening",
          "Join us for the {v}.|You are invited to the {v}.|The {v} is coming up.|Save the date: {v}.|"
          "Come to our {v}.", pick(EVENTS)),
        f("date", DATE, "Date|When|Day|On|Scheduled for",
          "It takes place on {v}.|The date is {v}.|Mark {v} in your calendar.|Happening {v}.|Set for {v}.", date),
        f("start_time", {"type": "string"}, "Time|Starts|Start time|Doors open|Begins",
          "It starts at {v}.|Doors open at {v}.|We begin at {v}.|Kick-off at {v}.|From {v} onwards.", clock),
        f("venue", STR, "Venue|Where|Place|Location|Held at",
          "It will be held at {v}.|Meet at {v}.|The venue is {v}.|See you at {v}.|Hosted at {v}.", pick(VENUES, 0.5)),
        f("city", STR, "City|Town|In|Host city|Metro",
          "The event is in {v}.|Held in {v}.|Come to {v}.|It's in {v}.|Located in {v}."),
        f("organizer", STR, "Organizer|Host|Contact person|Organised by|Run by",
          "Organized by {v}.|Your host is {v}.|Questions go to {v}.|Organised by {v}.|Run by {v}.", person),
        f("capacity", INT, "Capacity|Seats|Max guests|Spots|Places",
          "There are {v} seats.|Room for {v} guests.|Limited to {v} people.|Up to {v} attendees.|{v} places left.",
          integer(10, 2000)),
    ), "Event announcement|Invitation|Save the date|Upcoming event|Event notice",
        lambda rng: (lambda c: {"city": (c, c)})(rng.choice(CITIES)[0])),
    Domain("product", (
        f("name", STR, "Product|Item|Name|Article|Product name",
          "Meet the {v}.|Introducing the {v}.|This {v} is a bestseller.|Our {v} is back.|Get the {v} today.",
          pick(PRODUCTS, 0.5)),
        f("brand", STR, "Brand|Make|Manufacturer|By|Label",
          "Made by {v}.|From the brand {v}.|A {v} product.|Designed by {v}.|Crafted by {v}.", pick(BRANDS, 0.5)),
        f("sku", STR, "SKU|Item code|Art. no.|Product code|Model no.",
          "SKU {v}.|Item code {v}.|Order it as {v}.|Catalog number {v}.|Model {v}.", code(("SKU-", "A", "PRD-"), 6)),
        f("price", NUM, "Price|Cost|Now only|Our price|Retail price",
          "It costs {v}.|Yours for {v}.|Priced at {v}.|Now only {v}.|Retail {v}."),
        f("currency", CUR, "", ""),
        f("in_stock", BOOL, "Availability|Stock|In stock|Available|Stock status",
          "It is {v}.|Currently {v}.|Status: {v}.|Right now {v}.|We are {v}.",
          boolean(["in stock", "available", "yes"], ["out of stock", "sold out", "no"])),
        f("category", STR, "Category|Department|Section|Type|Range",
          "Listed under {v}.|Find it in {v}.|Category {v}.|Part of our {v} range.|Shelved in {v}.",
          pick(CATEGORIES)),
        f("weight_grams", INT, "Weight|Weight (g)|Mass|Net weight|Shipping weight",
          "It weighs {v}.|Weight {v}.|Only {v}.|Net weight {v}.|Ships at {v}.",
          integer(50, 9000, (" g", "g", " grams"))),
    ), "Product sheet|New arrival|Catalog entry|Product details|Listing",
        _money_fields("price", "currency", 199, 99999)),
    Domain("order", (
        f("order_id", STR, "Order|Order number|Order ID|Order #|Confirmation no.",
          "Your order {v} is confirmed.|Order {v} received.|We got order {v}.|Thanks for order {v}.|"
          "Confirmation {v}.", code(("ORD-", "#", "A-", "SO"), 6)),
        f("customer", STR, "Customer|Name|Ship to|Recipient|Buyer",
          "Hi {v},|Dear {v},|Hello {v}!|Thanks {v}.|Greetings {v},"),
        f("email", {"type": "string", "format": "email"}, "Email|E-mail|Contact|Notify|Account",
          "We emailed {v}.|Updates go to {v}.|Receipt sent to {v}.|Account {v}.|Notifications to {v}."),
        f("item", STR, "Item|Product|Article|Goods|Line item",
          "You ordered a {v}.|It contains a {v}.|Item: {v}.|One {v} is included.|Your {v} is packed.",
          pick(PRODUCTS, 0.5)),
        f("quantity", INT, "Qty|Quantity|Units|Count|Pieces",
          "Quantity {v}.|You bought {v}.|{v} in total.|Count: {v}.|Pieces: {v}.",
          integer(1, 40, ("", " pcs", " units"))),
        f("total", NUM, "Total|Order total|Charged|Amount|Paid",
          "You paid {v}.|Total charged {v}.|Order total {v}.|Amount {v}.|We billed {v}."),
        f("currency", CUR, "", ""),
        f("order_date", DATE, "Order date|Placed|Date|Ordered on|Purchase date",
          "Placed on {v}.|Ordered {v}.|Purchased {v}.|Date of order {v}.|Bought on {v}.", date),
        f("status", {"type": "string", "enum": ["processing", "shipped", "delivered", "cancelled"]},
          "Status|Order status|State|Progress|Current status",
          "Your order is {v}.|It has been {v}.|Status: {v}.|Currently {v}.|The order is {v}.", ORDER_STATUS),
    ), "Order confirmation|Your order|Order update|Receipt|Shipping notice",
        _both(_money_fields("total", "currency", 300, 500000), _person_fields("customer", "email"))),
    Domain("ticket", (
        f("ticket_id", STR, "Ticket|Ticket ID|Case|Case number|Ref",
          "Ticket {v} opened.|Re: case {v}.|Regarding ticket {v}.|Case {v} logged.|Ref {v}.",
          code(("TCK-", "CASE-", "#", "SR"), 5)),
        f("customer", STR, "Customer|Reporter|From|Requester|Submitted by",
          "Reported by {v}.|From {v}.|{v} wrote in.|Raised by {v}.|Submitted by {v}.", person),
        f("subject", STR, "Subject|Issue|Problem|Summary|Topic",
          "The problem: {v}.|Issue: {v}.|Customer says: {v}.|Summary: {v}.|Complaint: {v}.", pick(ISSUES)),
        f("priority", {"type": "string", "enum": ["low", "medium", "high", "urgent"]},
          "Priority|Severity|Prio|Urgency|Importance",
          "Priority is {v}.|Marked {v}.|Severity {v}.|Flagged {v}.|Urgency: {v}.", PRIORITY),
        f("status", {"type": "string", "enum": ["open", "pending", "closed"]}, "Status|State|Ticket status|Stage|Now",
          "Status: {v}.|The ticket is {v}.|Currently {v}.|Now {v}.|Stage {v}.", STATUS),
        f("created", DATE, "Created|Opened|Date|Logged|Received",
          "Opened on {v}.|Created {v}.|Logged {v}.|Received {v}.|Filed on {v}.", date),
        f("product", STR, "Product|Affects|Component|Service|Area",
          "It affects the {v}.|Related to the {v}.|Product: {v}.|About the {v}.|Concerns the {v}.",
          pick(PRODUCTS, 0.5)),
    ), "Support ticket|Help desk|Customer support|Incident report|Service request", lambda rng: {}),
    Domain("address", (
        f("recipient", STR, "Name|Recipient|Attn|To|Addressee",
          "Deliver to {v}.|For {v}.|Attention {v}.|Addressed to {v}.|Hand to {v}.", person),
        f("street", STR, "Street|Address|Street address|Line 1|Road",
          "Street: {v}.|At {v}.|The address is {v}.|Find us on {v}.|Located on {v}."),
        f("city", STR, "City|Town|Locality|Municipality|Place",
          "City of {v}.|In {v}.|Town: {v}.|Locality {v}.|Settlement {v}."),
        f("postal_code", STR, "Postal code|ZIP|Postcode|PLZ|Post code",
          "ZIP {v}.|Postcode {v}.|Postal code {v}.|Code {v}.|Sorting code {v}."),
        f("country", STR, "Country|Nation|State|Land|Country/region",
          "Country: {v}.|In {v}.|Nation: {v}.|Land {v}.|Region {v}."),
        f("phone", STR, "Phone|Tel|Contact number|Mobile|Telephone",
          "Phone {v}.|Call {v} on arrival.|Tel. {v}.|Mobile {v}.|Dial {v}.", phone),
    ), "Shipping label|Delivery address|Mailing address|Address|Postal details",
        lambda rng: _street(rng)),
    Domain("job_post", (
        f("job_title", STR, "Position|Job title|Role|Opening|Vacancy",
          "We are hiring a {v}.|Open role: {v}.|Join us as {v}.|Seeking a {v}.|Vacancy for a {v}.", pick(JOBS)),
        f("company", STR, "Company|Employer|Hiring company|Organisation|Firm",
          "{v} is hiring.|Work at {v}.|About {v}.|Employer: {v}.|Join the team at {v}.", pick(COMPANIES, 0.5)),
        f("location", STR, "Location|City|Office|Based in|Workplace",
          "The office is in {v}.|Based in {v}.|Location: {v}.|Work from {v}.|Our site in {v}.",
          lambda rng: (lambda c: (c, c))(rng.choice(CITIES)[0])),
        f("salary", NUM, "Salary|Pay|Compensation|Annual salary|Wage",
          "Salary up to {v}.|We pay {v}.|Compensation: {v}.|Earn {v} a year.|Wage {v}."),
        f("currency", CUR, "", ""),
        f("remote", BOOL, "Remote|Remote work|Work from home|Remote-friendly|Telework",
          "Remote: {v}.|Working remotely: {v}.|Home office: {v}.|Remote option {v}.|Telework {v}.",
          boolean(["yes", "possible", "allowed"], ["no", "not possible", "on-site only"])),
        f("posted", DATE, "Posted|Date posted|Published|Listed|Since",
          "Posted {v}.|Published on {v}.|Listed {v}.|Online since {v}.|Advertised {v}.", date),
        f("skills", STRS, "Skills|Requirements|Must know|You bring|Stack",
          "You know {v}.|Required: {v}.|Skills: {v}.|Experience with {v}.|Bring {v}.", string_list(SKILLS)),
    ), "Job posting|We're hiring|Career opportunity|Open position|Job ad",
        _money_fields("salary", "currency", 2500000, 15000000)),
)
HELDOUT_DOMAINS = frozenset({"job_post"})
TRAIN_LAYOUTS = ("form", "prose", "mixed", "inline")
HELDOUT_LAYOUTS = ("bullets", "letter")


def _street(rng: random.Random) -> dict[str, Value]:
    city, country, postal = rng.choice(CITIES)
    street = f"{rng.choice(STREETS)} {rng.randint(1, 240)}"
    return {"street": (street, street), "city": (city, city), "country": (country, country),
            "postal_code": (postal, postal)}


@dataclass(frozen=True)
class Example:
    """A generated task: source text, schema, gold answer and the template ids it used."""

    domain: str
    layout: str
    text: str
    schema: dict[str, Any]
    answer: dict[str, Any]
    templates: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        messages = extraction_messages(self.text, self.schema)
        return {"domain": self.domain, "layout": self.layout, "text": self.text, "schema": self.schema,
                "answer": self.answer, "templates": list(self.templates), "prompt": render_prompt(messages),
                "completion": render_answer(self.answer)}


def _variants(options: tuple[str, ...], heldout: bool) -> tuple[int, ...]:
    """Indices of the variants a split may use: the last one belongs to the held-out split only."""
    return (len(options) - 1,) if heldout else tuple(range(len(options) - 1))


def _render_field(rng: random.Random, fld: Field, surface: str, style: str, heldout: bool) -> tuple[str, str]:
    """One line or sentence mentioning a field, and the template id used."""
    if style == "phrase":
        i = rng.choice(_variants(fld.phrases, heldout))
        return fld.phrases[i].format(v=surface), f"{fld.key}/phrase{i}"
    i = rng.choice(_variants(fld.labels, heldout))
    label = fld.labels[i]
    if rng.random() < 0.1:
        label = label.upper()
    separator = {"form": rng.choice([": ", ": ", " - ", ":\t"]), "inline": rng.choice(["=", ": "]),
                 "bullets": " — "}[style]
    line = f"{label}{separator}{surface}"
    return (f"• {line}" if style == "bullets" else line), f"{fld.key}/label{i}"


def _layout(rng: random.Random, mentions: list[tuple[Field, str]], layout: str, heldout: bool
            ) -> tuple[list[str], list[str]]:
    lines, ids = [], []
    for fld, surface in mentions:
        if layout in ("form", "bullets", "inline"):
            style = layout
        elif layout in ("prose", "letter"):
            style = "phrase"
        else:
            style = rng.choice(["form", "phrase"])
        text, tid = _render_field(rng, fld, surface, style, heldout)
        lines.append(text)
        ids.append(tid)
    return lines, ids


def _join(rng: random.Random, lines: list[str], layout: str) -> str:
    if layout == "inline":
        return rng.choice(["; ", " | ", ", "]).join(lines)
    if layout == "prose":
        return " ".join(lines)
    if layout == "letter":
        return "Hello,\n\n" + " ".join(lines) + "\n\nKind regards"
    return "\n".join(lines)


def make_example(rng: random.Random, heldout: bool) -> Example:
    """One extraction task for the training split, or for the held-out one."""
    pool = DOMAINS if heldout else tuple(d for d in DOMAINS if d.name not in HELDOUT_DOMAINS)
    domain = rng.choice(pool)
    layout = rng.choice(HELDOUT_LAYOUTS if heldout else TRAIN_LAYOUTS)
    values = domain.linked(rng)
    for fld in domain.fields:
        if fld.key not in values:
            if fld.make is None:
                raise ValueError(f"domain {domain.name!r}: field {fld.key!r} has no value maker")
            values[fld.key] = fld.make(rng)
    mentioned = [fld for fld in domain.fields if fld.labels != ("",)]
    rng.shuffle(mentioned)
    mentioned = mentioned[: rng.randint(min(3, len(mentioned)), len(mentioned))]
    asked = [fld for fld in domain.fields
             if fld in mentioned or (fld.labels == ("",) and _currency_asked(fld, mentioned))]
    asked = rng.sample(asked, rng.randint(min(2, len(asked)), len(asked)))
    if rng.random() < 0.5:
        asked.sort(key=domain.fields.index)
    lines, ids = _layout(rng, [(fld, values[fld.key][1]) for fld in mentioned], layout, heldout)
    headers = tuple(domain.headers.split("|"))
    h = rng.choice(_variants(headers, heldout))
    header = headers[h]
    if rng.random() < 0.4:
        lines.insert(rng.randint(0, len(lines)), rng.choice(NOISE).format(n=rng.randint(1, 999)))
    text = header + "\n" + _join(rng, lines, layout)
    schema = {"type": "object", "properties": {fld.key: fld.schema for fld in asked},
              "required": [fld.key for fld in asked], "additionalProperties": False}
    answer = {fld.key: values[fld.key][0] for fld in asked}
    templates = (f"{domain.name}/layout/{layout}", f"{domain.name}/header{h}", *(f"{domain.name}/{t}" for t in ids))
    return Example(domain.name, layout, text, schema, answer, templates)


def _currency_asked(currency: Field, mentioned: list[Field]) -> bool:
    """A currency code can be asked for only when the amount that spells it is in the text."""
    return any(m.schema == NUM for m in mentioned) and currency.key == "currency"


def generate(count: int, seed: int, heldout: bool) -> list[Example]:
    """``count`` examples of one split; the same seed always gives the same examples."""
    rng = random.Random(f"{seed}/{'heldout' if heldout else 'train'}")
    return [make_example(rng, heldout) for _ in range(count)]


def write_jsonl(path: Path, examples: list[Example]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for ex in examples:
            out.write(json.dumps(ex.record(), ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/structspec-corpus"), help="output folder")
    parser.add_argument("--train", type=int, default=60000, help="training examples")
    parser.add_argument("--heldout", type=int, default=600, help="held-out examples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "train.jsonl", generate(args.train, args.seed, heldout=False))
    write_jsonl(args.out / "heldout.jsonl", generate(args.heldout, args.seed, heldout=True))
    print(f"wrote {args.train} training and {args.heldout} held-out examples to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
