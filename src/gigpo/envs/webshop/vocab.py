"""Vocabulary of the generated WebShop catalog: categories, product types, attributes, options.

Each product type has a search query (WebShop's ``query`` field), an Amazon-style category path
(``product_category``, levels joined by `` › ``), a pool of attributes (the phrases WebShop's
instructions ask for, e.g. "natural looking"), option dimensions with their values, and a price
range. Option values are unique within a type so that ``click[value]`` is unambiguous.
"""

from __future__ import annotations

COLORS = ["black", "white", "navy blue", "grey", "red", "pink", "beige", "green", "brown", "purple", "gold", "silver"]
SIZES = ["x-small", "small", "medium", "large", "x-large", "xx-large"]
PACKS = ["pack of 1", "pack of 2", "pack of 3", "pack of 6", "pack of 12"]

# category -> list of (type noun phrase, category path tail, attributes, {option: values}, (min, max) price)
PRODUCT_TYPES: dict[str, list[tuple]] = {
    "beauty": [
        (
            "hair extension",
            "Hair Care › Hair Extensions",
            ["natural looking", "clip in", "heat resistant", "long lasting", "easy to apply", "human hair"],
            {
                "color": ["jet black", "dark brown", "ash blonde", "auburn", "platinum"],
                "size": ["14 inch", "18 inch", "22 inch"],
            },
            (12, 80),
        ),
        (
            "shampoo",
            "Hair Care › Shampoo",
            ["sulfate free", "paraben free", "for dry hair", "cruelty free", "tea tree", "argan oil"],
            {
                "size": ["8 fl oz", "16 fl oz", "32 fl oz"],
                "scent": ["coconut", "lavender scent", "citrus", "unscented"],
            },
            (5, 35),
        ),
        (
            "face serum",
            "Skin Care › Face › Serums",
            ["vitamin c", "hyaluronic acid", "anti aging", "fragrance free", "for sensitive skin", "oil free"],
            {"size": ["1 fl oz", "2 fl oz"]},
            (8, 60),
        ),
        (
            "lipstick",
            "Makeup › Lips › Lipstick",
            ["long lasting", "matte finish", "cruelty free", "paraben free", "moisturizing"],
            {"color": ["ruby red", "nude pink", "coral", "berry", "mauve"]},
            (4, 30),
        ),
        (
            "nail polish",
            "Foot, Hand & Nail Care › Nail Polish",
            ["quick dry", "non toxic", "chip resistant", "high gloss"],
            {
                "color": ["cherry red", "baby pink", "midnight blue", "clear", "lilac"],
                "size": ["pack of 1", "pack of 3", "pack of 6"],
            },
            (3, 25),
        ),
    ],
    "electronics": [
        (
            "bluetooth speaker",
            "Portable Audio & Video › Speakers",
            ["waterproof", "long battery life", "bluetooth 5.0", "built in microphone", "stereo sound"],
            {"color": COLORS[:6]},
            (15, 150),
        ),
        (
            "wireless earbuds",
            "Headphones › Earbud Headphones",
            ["noise cancelling", "charging case", "sweat resistant", "touch control", "bluetooth 5.0"],
            {"color": ["black", "white", "navy blue", "rose gold"]},
            (15, 200),
        ),
        (
            "usb c cable",
            "Computers & Accessories › Cables › USB Cables",
            ["fast charging", "braided nylon", "data sync", "durable"],
            {"size": ["3 ft", "6 ft", "10 ft"], "color": ["black", "white", "red", "grey"]},
            (5, 25),
        ),
        (
            "phone case",
            "Cell Phones & Accessories › Cases",
            ["shockproof", "slim fit", "wireless charging compatible", "scratch resistant", "kickstand"],
            {
                "color": ["black", "clear", "navy blue", "pink", "green"],
                "size": ["iphone 13", "iphone 14", "galaxy s22"],
            },
            (6, 40),
        ),
        (
            "hdmi cable",
            "Television & Video › Accessories › Cables",
            ["4k", "high speed", "gold plated", "ethernet"],
            {"size": ["3 ft", "6 ft", "15 ft"]},
            (5, 30),
        ),
    ],
    "fashion": [
        (
            "t-shirt",
            "Clothing › Men › Shirts › T-Shirts",
            ["cotton", "short sleeve", "machine wash", "relaxed fit", "crew neck"],
            {"color": COLORS[:8], "size": SIZES},
            (8, 40),
        ),
        (
            "running shoe",
            "Shoes › Women › Athletic › Running",
            ["non slip", "rubber sole", "lightweight", "memory foam", "breathable mesh"],
            {"color": ["black white", "grey", "pink", "navy blue", "white"], "size": ["6", "7", "8", "9", "10", "11"]},
            (25, 120),
        ),
        (
            "hoodie",
            "Clothing › Women › Fashion Hoodies & Sweatshirts",
            ["fleece lined", "long sleeve", "drawstring", "machine wash", "kangaroo pocket"],
            {"color": COLORS[:8], "size": SIZES},
            (15, 60),
        ),
        (
            "yoga pant",
            "Clothing › Women › Active › Leggings",
            ["high waist", "tummy control", "moisture wicking", "squat proof", "pocket"],
            {"color": ["black", "navy blue", "grey", "purple", "green"], "size": SIZES[:5]},
            (12, 50),
        ),
        (
            "winter jacket",
            "Clothing › Men › Coats & Jackets",
            ["water resistant", "hooded", "zip closure", "insulated", "windproof"],
            {"color": ["black", "army green", "navy blue", "khaki"], "size": SIZES},
            (40, 200),
        ),
    ],
    "grocery": [
        (
            "protein bar",
            "Snacks › Bars › Protein Bars",
            ["gluten free", "low sugar", "high protein", "non gmo", "keto friendly"],
            {"flavor": ["chocolate chip", "peanut butter", "cookie dough", "salted caramel"], "size": PACKS},
            (10, 45),
        ),
        (
            "green tea",
            "Beverages › Tea › Green Tea",
            ["organic", "caffeine free", "individually wrapped", "usda organic", "natural ingredients"],
            {"flavor": ["jasmine", "matcha", "mint", "honey lemon"], "size": ["20 count", "40 count", "100 count"]},
            (4, 30),
        ),
        (
            "coffee bean",
            "Beverages › Coffee › Whole Bean",
            ["dark roast", "fair trade", "single origin", "medium roast", "low acid"],
            {"size": ["12 ounce", "2 pound", "5 pound"]},
            (8, 60),
        ),
        (
            "beef jerky",
            "Snacks › Jerky & Dried Meats",
            ["high protein", "low fat", "gluten free", "grass fed", "no preservatives"],
            {
                "flavor": ["teriyaki", "original", "sweet & spicy", "black pepper"],
                "size": ["2.5 ounce", "pack of 4", "pack of 8"],
            },
            (6, 45),
        ),
        (
            "olive oil",
            "Pantry Staples › Oils › Olive",
            ["extra virgin", "cold pressed", "non gmo", "first cold press", "glass bottle"],
            {"size": ["16.9 fl oz", "33.8 fl oz", "1 gallon"]},
            (8, 50),
        ),
    ],
    "garden": [
        (
            "garden hose",
            "Patio, Lawn & Garden › Watering Equipment › Hoses",
            ["expandable", "leak proof", "heavy duty", "kink free", "brass fittings"],
            {"size": ["25 ft", "50 ft", "100 ft"], "color": ["green", "blue", "black"]},
            (15, 80),
        ),
        (
            "solar light",
            "Patio, Lawn & Garden › Outdoor Lighting › Pathway Lights",
            ["waterproof", "auto on off", "warm white", "solar powered", "easy to install"],
            {"size": ["pack of 2", "pack of 6", "pack of 12"]},
            (12, 60),
        ),
        (
            "throw pillow cover",
            "Home & Kitchen › Decorative Pillows › Throw Pillow Covers",
            ["machine washable", "hidden zipper", "linen", "double sided", "farmhouse style"],
            {
                "color": ["beige", "grey", "navy blue", "mustard", "sage green"],
                "size": ["16x16 inch", "18x18 inch", "20x20 inch"],
            },
            (6, 35),
        ),
        (
            "planter pot",
            "Patio, Lawn & Garden › Gardening › Planters",
            ["drainage hole", "ceramic", "indoor outdoor", "modern design", "with saucer"],
            {"color": ["white", "terracotta", "black", "speckled"], "size": ["4 inch", "6 inch", "8 inch"]},
            (8, 60),
        ),
        (
            "shower curtain",
            "Home & Kitchen › Bath › Shower Curtains",
            ["waterproof", "machine washable", "mildew resistant", "with hooks", "fabric"],
            {"color": ["white", "grey", "blue", "botanical print"], "size": ["72x72 inch", "72x84 inch"]},
            (10, 45),
        ),
    ],
}

CATEGORY_ROOTS = {
    "beauty": "Beauty & Personal Care",
    "electronics": "Electronics",
    "fashion": "Clothing, Shoes & Jewelry",
    "grocery": "Grocery & Gourmet Food",
    "garden": "Home & Garden",
}

BRANDS = [
    "Lumora",
    "Nexa",
    "Veltrix",
    "Orinco",
    "Brisa",
    "Kaldo",
    "Mirelle",
    "Zentro",
    "Aurix",
    "Palvo",
    "Quenby",
    "Rovano",
    "Sylke",
    "Tavrin",
    "Umbrel",
    "Vexo",
    "Wrenly",
    "Yarrow",
    "Zuli",
    "Caspian",
    "Dunmore",
    "Elkwood",
    "Fennick",
    "Galloway",
    "Harlow",
    "Ivory Lane",
    "Juniper",
    "Kestrel",
    "Larkspur",
    "Marlowe",
]
DESCRIPTORS = [
    "premium",
    "classic",
    "modern",
    "deluxe",
    "everyday",
    "essential",
    "signature",
    "original",
    "ultra",
    "pro",
]
INSTRUCTION_OPENERS = [
    "i need",
    "i am looking for",
    "i want",
    "find me",
    "i'm searching for",
    "show me",
    "i would like",
]
REVIEW_TITLES = [
    "Great value",
    "Works as described",
    "Not bad",
    "Love it",
    "Would buy again",
    "Disappointed",
    "Good quality",
]
REVIEW_BODIES = [
    "Exactly what I was looking for.",
    "Arrived quickly and works well.",
    "Quality is fine for the price.",
    "Not as pictured but still useful.",
    "My second purchase, still happy.",
    "Stopped working after a month.",
]
